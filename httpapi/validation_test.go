package httpapi_test

import (
	"testing"

	"github.com/parleychat/parley"
)

// TestQueryAndKeyValidation: every integer query parameter that is present
// must be one integer in range (an empty value such as `after=` is not the
// default), `audit?limit=0` is out of range like any other value, and an
// Idempotency-Key with bytes outside printable ASCII is 400. Nothing is
// stored for a refused send.
func TestQueryAndKeyValidation(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		ana := s.user("ana", parley.RoleAdmin)
		s.user("ben", parley.RoleUser)
		s.do("POST", "/api/convs", ana, map[string]any{"id": "c-val", "title": "v", "members": []string{"ben"}}).want(201)

		for _, tc := range []struct {
			path   string
			status int
		}{
			{"/api/convs/c-val/events", 200},
			{"/api/convs/c-val/events?after=0&limit=1&epoch=1", 200},
			{"/api/convs/c-val/events?after=", 400},
			{"/api/convs/c-val/events?limit=", 400},
			{"/api/convs/c-val/events?epoch=", 400},
			{"/api/convs/c-val/events?after=1&after=2", 400},
			{"/api/convs/c-val/events?after=x", 400},
			{"/api/convs/c-val/events?limit=0", 400},
			{"/api/convs", 200},
			{"/api/convs?limit=", 400},
			{"/api/convs?limit=0", 400},
			{"/api/admin/audit", 200},
			{"/api/admin/audit?limit=1", 200},
			{"/api/admin/audit?limit=200", 200},
			{"/api/admin/audit?limit=0", 400},
			{"/api/admin/audit?limit=201", 400},
			{"/api/admin/audit?limit=-1", 400},
			{"/api/admin/audit?limit=", 400},
			{"/api/admin/audit?before=", 400},
			{"/api/admin/audit?before=-1", 400},
			{"/api/admin/users?limit=", 400},
			{"/api/admin/users?limit=0", 400},
			{"/api/admin/users?limit=201", 400},
			{"/api/admin/users?limit=200", 200},
			{"/api/admin/convs?limit=0", 400},
			{"/api/admin/exports?limit=", 400},
			{"/api/admin/hooks?limit=0", 400},
			{"/api/admin/hooks?limit=x", 400},
		} {
			t.Run(tc.path, func(t *testing.T) {
				r := s.do("GET", tc.path, ana, nil)
				r.t = t
				if tc.status == 200 {
					r.want(200)
				} else {
					r.want(tc.status, parley.CodeInvalidArgument)
				}
			})
		}

		head := s.head("c-val")
		for _, tc := range []struct {
			name, key string
			status    int
		}{
			{"latin1_bare", "caf\xe9", 400},
			{"utf8_bare", "café", 400},
			{"utf8_quoted", `"café"`, 400},
			{"ascii_bare", "k-ascii-1", 201},
			{"ascii_quoted", `"k ascii 2"`, 201},
		} {
			t.Run("key_"+tc.name, func(t *testing.T) {
				r := s.do("POST", "/api/convs/c-val/messages", ana, map[string]string{"body": "hi"}, "Idempotency-Key", tc.key)
				r.t = t
				if tc.status == 201 {
					r.want(201)
					head++
				} else {
					r.want(tc.status, parley.CodeInvalidArgument)
				}
				if got := s.head("c-val"); got != head {
					t.Errorf("head %d after %s, want %d", got, tc.name, head)
				}
			})
		}
	})
}
