package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// Login logs a device in with POST /api/login on server (http://HOST:PORT)
// and returns its token, for Options.Token. A refused login comes back as
// the *parley.Error of the problem body (UNAUTHENTICATED, INVALID_ARGUMENT,
// RATE_LIMITED, …); hc nil means http.DefaultClient.
func Login(ctx context.Context, hc *http.Client, server string, r parley.LoginRequest) (string, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	b, _ := json.Marshal(map[string]string{
		"login": r.Login, "password": r.Password, "device_id": r.DeviceID, "install_id": r.InstallID,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(server, "/")+"/api/login", bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("client: login: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		var p wire.Problem
		if json.Unmarshal(body, &p) != nil || p.Code == "" {
			return "", fmt.Errorf("client: login: status %d", resp.StatusCode)
		}
		return "", &parley.Error{Code: p.Code, Msg: p.Detail}
	}
	var out struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Token == "" {
		return "", fmt.Errorf("client: login: no token in the reply")
	}
	return out.Token, nil
}
