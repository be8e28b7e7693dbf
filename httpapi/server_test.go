package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/httpapi"
	"github.com/parleychat/parley/sqlite"
)

// TestServerPolicies: GET /api/server tells a client, without credentials,
// the recall window (the default's when none is given) and the edit window
// of the configuration in force, absent when edits have no window; the
// demo accounts only on a demo server.
func TestServerPolicies(t *testing.T) {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	withEdit, _, err := config.Parse([]byte("edit_window: 15m\n"))
	if err != nil {
		t.Fatal(err)
	}
	demo := &httpapi.DemoAccounts{Users: []string{"ana"}, Password: "pw"}
	tests := []struct {
		name   string
		recall time.Duration
		cfg    *config.Config
		demo   *httpapi.DemoAccounts
		want   map[string]any
	}{
		{"defaults", 0, nil, nil, map[string]any{"recall_window_ms": float64(parley.DefaultRecallWindow.Milliseconds())}},
		{"recall window given", 90 * time.Second, nil, nil, map[string]any{"recall_window_ms": float64(90000)}},
		{"edit window configured", 0, withEdit, demo, map[string]any{
			"recall_window_ms": float64(600000), "edit_window_ms": float64(900000),
			"demo": map[string]any{"users": []any{"ana"}, "password": "pw"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := httpapi.Deps{
				App: app.New(app.Options{Store: s}), Store: s, Gateway: http.NotFoundHandler(),
				Log: slog.New(slog.NewTextHandler(io.Discard, nil)), RecallWindow: tc.recall, Demo: tc.demo,
			}
			if tc.cfg != nil {
				cfg := tc.cfg
				d.Config = func() *config.Config { return cfg }
			}
			srv := httptest.NewServer(httpapi.NewHandler(d))
			defer srv.Close()
			r, err := http.Get(srv.URL + "/api/server")
			if err != nil {
				t.Fatal(err)
			}
			defer r.Body.Close()
			if r.StatusCode != http.StatusOK {
				t.Fatalf("status %d", r.StatusCode)
			}
			var got map[string]any
			if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("GET /api/server = %v, want %v", got, tc.want)
			}
		})
	}
}
