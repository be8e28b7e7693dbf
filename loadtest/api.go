package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// api is the HTTP API of one server, as the load generator uses it: users
// through the operations API, logins, conversations and members, and the
// committed log (the checker's ground truth).
type api struct {
	base string // http://host:port
	hc   *http.Client
}

func newAPI(base string) *api {
	return &api{base: base, hc: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second,
	}}}
}

// call sends one JSON request and decodes a 2xx body into out. Other
// statuses come back as *parley.Error with the problem's code.
func (a *api) call(ctx context.Context, method, path, token string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	for attempt := 0; ; attempt++ {
		if in != nil {
			body.(*bytes.Reader).Seek(0, io.SeekStart)
		}
		req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if in != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := a.hc.Do(req)
		if err != nil {
			// The server may be restarting (a kill of the run): retry
			// the idempotent reads and the setup calls a few times.
			if attempt < 5 && ctx.Err() == nil {
				time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
				continue
			}
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		if resp.StatusCode/100 == 2 {
			if out != nil {
				if err := json.Unmarshal(data, out); err != nil {
					return fmt.Errorf("%s %s: decode reply: %w", method, path, err)
				}
			}
			return nil
		}
		var p struct {
			Code   parley.Code `json:"code"`
			Detail string      `json:"detail"`
		}
		json.Unmarshal(data, &p)
		if (p.Code == parley.CodeUnavailable || p.Code == parley.CodeRateLimited) && attempt < 5 && ctx.Err() == nil {
			time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
			continue
		}
		if p.Code == "" {
			return fmt.Errorf("%s %s: status %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(data)))
		}
		return &parley.Error{Code: p.Code, Msg: fmt.Sprintf("%s %s: %s", method, path, p.Detail)}
	}
}

func (a *api) login(ctx context.Context, login, password, device, install string) (string, error) {
	var r struct {
		Token string `json:"token"`
	}
	err := a.call(ctx, http.MethodPost, "/api/login", "", map[string]string{
		"login": login, "password": password, "device_id": device, "install_id": install,
	}, &r)
	return r.Token, err
}

func (a *api) createUser(ctx context.Context, admin, id, password string) error {
	return a.call(ctx, http.MethodPost, "/api/admin/users", admin, map[string]string{"id": id, "password": password}, nil)
}

// createConv creates a conversation as the token's user and returns its
// head (the seq of the last creation event).
func (a *api) createConv(ctx context.Context, token, id string, kind parley.ConvKind, members []string) (int64, error) {
	var r struct {
		Head int64 `json:"head"`
	}
	err := a.call(ctx, http.MethodPost, "/api/convs", token, map[string]any{
		"id": id, "kind": kind, "title": id, "members": members,
	}, &r)
	return r.Head, err
}

// member adds (add) or removes a member and returns the event's seq (0:
// nothing changed).
func (a *api) member(ctx context.Context, token, conv, user string, add bool) (int64, error) {
	var r struct {
		Seq int64 `json:"seq"`
	}
	var err error
	if add {
		err = a.call(ctx, http.MethodPost, "/api/convs/"+url.PathEscape(conv)+"/members", token, map[string]string{"user": user}, &r)
	} else {
		err = a.call(ctx, http.MethodDelete, "/api/convs/"+url.PathEscape(conv)+"/members/"+url.PathEscape(user), token, nil, &r)
	}
	return r.Seq, err
}

// events reads every event of conv the token's user may see.
func (a *api) events(ctx context.Context, token, conv string) ([]wire.Event, error) {
	var all []wire.Event
	var after int64
	for {
		var f wire.Frame
		q := "/api/convs/" + url.PathEscape(conv) + "/events?limit=200&after=" + strconv.FormatInt(after, 10)
		if err := a.call(ctx, http.MethodGet, q, token, nil, &f); err != nil {
			return nil, err
		}
		all = append(all, f.Events...)
		if f.NextAfter == nil || f.HasMore == nil || !*f.HasMore {
			return all, nil
		}
		if *f.NextAfter <= after {
			return nil, fmt.Errorf("events of %s: no progress past %d", conv, after)
		}
		after = *f.NextAfter
	}
}

// convs reads every page of a user's conversation list.
func (a *api) convs(ctx context.Context, token string) ([]wire.Conv, error) {
	var all []wire.Conv
	before := ""
	for {
		var r struct {
			Convs   []wire.Conv `json:"convs"`
			HasMore bool        `json:"has_more"`
			Next    string      `json:"next"`
		}
		q := "/api/convs?limit=" + strconv.Itoa(parley.MaxConvsPage)
		if before != "" {
			q += "&before=" + url.QueryEscape(before)
		}
		if err := a.call(ctx, http.MethodGet, q, token, nil, &r); err != nil {
			return nil, err
		}
		all = append(all, r.Convs...)
		if !r.HasMore {
			return all, nil
		}
		if r.Next == "" || r.Next == before {
			return nil, fmt.Errorf("convs: has_more without a new next")
		}
		before = r.Next
	}
}

// processStats reads the server's CPU seconds and resident bytes from its
// /metrics (the Prometheus process collector).
func (a *api) processStats(ctx context.Context) (cpu, rss float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("/metrics: status %d", resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for line := range strings.SplitSeq(string(data), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		switch name {
		case "process_cpu_seconds_total":
			cpu, _ = strconv.ParseFloat(strings.TrimSpace(val), 64)
			found++
		case "process_resident_memory_bytes":
			rss, _ = strconv.ParseFloat(strings.TrimSpace(val), 64)
			found++
		}
	}
	if found < 2 {
		return cpu, rss, fmt.Errorf("/metrics has no process_cpu_seconds_total or process_resident_memory_bytes")
	}
	return cpu, rss, nil
}
