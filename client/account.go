package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// Account is the HTTP API of the account a device token signs in to
// (docs/protocol.md, "The account"): the display name, a password change,
// and the signed-in devices. Frames and events name users by id; a client
// shows Name (the display name, or the id) in their place.
//
// A refused call comes back as the *parley.Error of the problem body; a
// call that got no answer has no protocol code (its outcome is unknown).
type Account struct {
	Server     string       // http://HOST:PORT
	Token      string       // the device token (Login)
	HTTPClient *http.Client // nil: http.DefaultClient
}

// Me is the signed-in user and device (GET /api/me).
type Me struct {
	User   string // the user id
	Name   string // what to show: DisplayName, or the id when none is set
	Role   parley.Role
	Device string
	// DisplayName is the name the user chose; empty when none.
	DisplayName string
	// Files is what the user's files take against the limits in force;
	// nil when the server stores no files (or answered a PATCH, which
	// carries none).
	Files *FileAllowance
}

// FileAllowance is a user's files against the limits in force (GET
// /api/me): Files and Bytes count uploads in progress (at their declared
// size) and finished files, as the server's quota check does.
type FileAllowance struct {
	Files       int64 `json:"files"`
	Bytes       int64 `json:"bytes"`
	Quota       int64 `json:"quota"`         // bytes all of the user's files may take
	MaxFileSize int64 `json:"max_file_size"` // bytes one file may have
}

// Fits reports whether a file of size bytes may be uploaded now: within
// the largest file allowed and the quota left.
func (a FileAllowance) Fits(size int64) bool {
	return size <= a.MaxFileSize && a.Bytes+size <= a.Quota
}

// UserName is a user as the directory shows them (GET /api/users/{id}).
type UserName struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name,omitempty"`
}

// Name is what a client shows for the user: the display name, or the id.
func (u UserName) Name() string {
	if u.DisplayName != "" {
		return u.DisplayName
	}
	return u.ID
}

// DeviceSession is one signed-in device of the user (GET /api/me/sessions).
type DeviceSession struct {
	DeviceID  string
	CreatedAt time.Time
	LastSeen  time.Time
	Current   bool // the device of this token
}

type meWire struct {
	User struct {
		ID          string `json:"id"`
		Name        string `json:"name"`
		DisplayName string `json:"display_name"`
		Role        string `json:"role"`
	} `json:"user"`
	Device string         `json:"device"`
	Files  *FileAllowance `json:"files"`
}

func (m meWire) me() Me {
	return Me{User: m.User.ID, Name: m.User.Name, Role: parley.Role(m.User.Role), Device: m.Device, DisplayName: m.User.DisplayName, Files: m.Files}
}

// Me returns the signed-in user and device.
func (a *Account) Me(ctx context.Context) (Me, error) {
	var m meWire
	err := a.do(ctx, http.MethodGet, "/api/me", nil, &m)
	return m.me(), err
}

// SetDisplayName sets the user's display name (trimmed, 1–64 characters;
// "" clears it) and returns the account as it now stands.
func (a *Account) SetDisplayName(ctx context.Context, name string) (Me, error) {
	var m meWire
	err := a.do(ctx, http.MethodPatch, "/api/me", map[string]string{"display_name": name}, &m)
	return m.me(), err
}

// User returns a user the caller may find in the directory (NOT_FOUND for
// one it may not, as for one that does not exist).
func (a *Account) User(ctx context.Context, id string) (UserName, error) {
	var u UserName
	err := a.do(ctx, http.MethodGet, "/api/users/"+url.PathEscape(id), nil, &u)
	return u, err
}

// ChangePassword changes the user's password: every other device of the
// user is signed out (their sockets close), this token stays. A wrong
// current password is INVALID_ARGUMENT, never UNAUTHENTICATED.
func (a *Account) ChangePassword(ctx context.Context, current, next string) error {
	return a.do(ctx, http.MethodPost, "/api/me/password", map[string]string{"current": current, "new": next}, nil)
}

// Sessions lists the user's signed-in devices, by device id.
func (a *Account) Sessions(ctx context.Context) ([]DeviceSession, error) {
	var out struct {
		Sessions []struct {
			DeviceID  string `json:"device_id"`
			CreatedAt string `json:"created_at"`
			LastSeen  string `json:"last_seen"`
			Current   bool   `json:"current"`
		} `json:"sessions"`
	}
	if err := a.do(ctx, http.MethodGet, "/api/me/sessions", nil, &out); err != nil {
		return nil, err
	}
	list := make([]DeviceSession, len(out.Sessions))
	for i, s := range out.Sessions {
		created, err1 := time.Parse(wire.TimeFormat, s.CreatedAt)
		seen, err2 := time.Parse(wire.TimeFormat, s.LastSeen)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("client: sessions: bad time in %+v", s)
		}
		list[i] = DeviceSession{DeviceID: s.DeviceID, CreatedAt: created, LastSeen: seen, Current: s.Current}
	}
	return list, nil
}

// SignOut signs one of the user's devices out (its tokens are deleted and
// its sockets close). NOT_FOUND when the device has no session.
func (a *Account) SignOut(ctx context.Context, device string) error {
	return a.do(ctx, http.MethodDelete, "/api/me/sessions/"+url.PathEscape(device), nil, nil)
}

// do sends one request with the token and decodes a 2xx body into out
// (nil: the body is not read); anything else is the problem's
// *parley.Error.
func (a *Account) do(ctx context.Context, method, path string, body, out any) error {
	hc := a.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(a.Server, "/")+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		var p wire.Problem
		if json.Unmarshal(b, &p) != nil || p.Code == "" {
			return fmt.Errorf("client: %s %s: status %d", method, path, resp.StatusCode)
		}
		return &parley.Error{Code: p.Code, Msg: p.Detail}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	return nil
}
