package httpapi_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/httpapi"
)

// TestServerPolicies: GET /api/server tells a client, without credentials,
// the recall window (the default's when none is given) and the edit window
// of the configuration in force, absent when edits have no window; the
// demo accounts only on a demo server.
func TestServerPolicies(t *testing.T) {
	backends(t, func(t *testing.T, open func(t *testing.T, o parley.Options) parley.Store) {
		st := open(t, parley.Options{})
		demo := &httpapi.DemoAccounts{Users: []string{"ana"}, Password: "pw"}
		tests := []struct {
			name   string
			recall time.Duration
			config string
			demo   *httpapi.DemoAccounts
			want   map[string]any
		}{
			{"defaults", 0, "", nil, map[string]any{"recall_window_ms": float64(parley.DefaultRecallWindow.Milliseconds())}},
			{"recall window given", 90 * time.Second, "", nil, map[string]any{"recall_window_ms": float64(90000)}},
			{"edit window configured", 0, "edit_window: 15m\n", demo, map[string]any{
				"recall_window_ms": float64(600000), "edit_window_ms": float64(900000),
				"demo": map[string]any{"users": []any{"ana"}, "password": "pw"},
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				s := start(t, st, serverOptions{config: tc.config, recallWindow: tc.recall, demo: tc.demo})
				var got map[string]any
				s.do("GET", "/api/server", "", nil).want(200).decode(&got)
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("GET /api/server = %v, want %v", got, tc.want)
				}
			})
		}
	})
}
