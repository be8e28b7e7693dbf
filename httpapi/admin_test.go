package httpapi_test

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/parleychat/parley"
)

// listPage is one page of an admin listing.
type listPage[T any] struct {
	Items   []T
	Next    string
	HasMore bool `json:"has_more"`
}

// walkList pages through an admin listing with limit and returns every
// item; each page is at most limit items, and has_more comes with a next.
func walkList[T any](t *testing.T, s *server, token, path string, limit int) []T {
	t.Helper()
	var all []T
	after := ""
	for range 100 {
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		if after != "" {
			q.Set("after", after)
		}
		var p listPage[T]
		s.do("GET", path+"?"+q.Encode(), token, nil).want(200).decode(&p)
		if len(p.Items) > limit || p.HasMore != (p.Next != "") {
			t.Fatalf("%s: page of %d for limit %d, has_more %v next %q", path, len(p.Items), limit, p.HasMore, p.Next)
		}
		all = append(all, p.Items...)
		if !p.HasMore {
			return all
		}
		after = p.Next
	}
	t.Fatalf("%s: no end", path)
	return nil
}

// TestAdminListings: an admin pages through users (role, disabled, last
// seen), conversations (kind, members, head, retention), export jobs
// (owner, state, size) and webhooks (never their secrets); each row once,
// in id order; non-admins get 403; every listing is audited; a foreign
// cursor is 400.
func TestAdminListings(t *testing.T) {
	backends(t, func(t *testing.T, open func(*testing.T, parley.Options) parley.Store) {
		s := start(t, open(t, parley.Options{}), serverOptions{})
		ana := s.user("ana", parley.RoleAdmin)
		ben := s.user("ben", parley.RoleUser)
		s.do("POST", "/api/admin/users", ana, map[string]any{"id": "ci-bot"}).want(201)
		s.do("POST", "/api/admin/users/ci-bot/disable", ana, nil).want(200)
		s.do("POST", "/api/convs", ana, map[string]any{"id": "g1", "title": "one", "members": []string{"ben"}}).want(201)
		s.do("POST", "/api/convs", ben, map[string]any{"id": "g2", "title": "two", "members": []string{}}).want(201)
		s.do("POST", "/api/convs", ana, map[string]any{"id": "d1", "kind": "direct", "title": "dm", "members": []string{"ben"}}).want(201)
		s.do("PUT", "/api/admin/convs/g1/retention", ana, map[string]any{"max_age": "720h", "keep_last": 10}).want(200)
		s.do("POST", "/api/convs/g1/members", ana, map[string]string{"user": "ci-bot"}).want(200)
		s.do("POST", "/api/admin/users/ci-bot/enable", ana, nil).want(200)
		var secrets []string
		for range 3 {
			var h struct{ ID, Secret string }
			s.do("POST", "/api/admin/hooks", ana, map[string]string{"conv": "g1", "bot": "ci-bot"}).want(201).decode(&h)
			secrets = append(secrets, h.Secret)
		}
		s.do("POST", "/exports", ben, map[string]string{"scope": "all"}, "Idempotency-Key", "x1").want(202)

		users := walkList[struct {
			ID       string
			Role     string
			Disabled bool
			LastSeen string `json:"last_seen"`
		}](t, s, ana, "/api/admin/users", 2)
		var got []string
		for _, u := range users {
			got = append(got, fmt.Sprintf("%s %s %v %v", u.ID, u.Role, u.Disabled, u.LastSeen != ""))
		}
		if want := []string{"ana admin false true", "ben user false true", "ci-bot user false false"}; !slices.Equal(got, want) {
			t.Errorf("users %q, want %q", got, want)
		}

		convs := walkList[struct {
			ID, Kind, Title string
			Head, Members   int64
			Retention       struct {
				MaxAge   string `json:"max_age"`
				KeepLast int64  `json:"keep_last"`
			}
		}](t, s, ana, "/api/admin/convs", 2)
		got = nil
		for _, c := range convs {
			got = append(got, fmt.Sprintf("%s %s %s head=%d members=%d %s/%d", c.ID, c.Kind, c.Title, c.Head, c.Members, c.Retention.MaxAge, c.Retention.KeepLast))
		}
		if want := []string{"d1 direct dm head=2 members=2 /0", "g1 group one head=3 members=3 720h0m0s/10", "g2 group two head=1 members=1 /0"}; !slices.Equal(got, want) {
			t.Errorf("convs %q, want %q", got, want)
		}

		exports := walkList[struct {
			JobID            string `json:"job_id"`
			User, Scope      string
			State, CreatedAt string
		}](t, s, ana, "/api/admin/exports", 1)
		if len(exports) != 1 || exports[0].JobID == "" || exports[0].User != "ben" || exports[0].Scope != "all" {
			t.Errorf("exports %+v, want one job", exports)
		}

		hooksRaw := s.do("GET", "/api/admin/hooks?limit=2", ana, nil).want(200)
		for _, sec := range secrets {
			if strings.Contains(string(hooksRaw.body), sec) {
				t.Errorf("hook listing shows a secret: %s", hooksRaw.body)
			}
		}
		hooks := walkList[struct{ ID, Conv, Bot, Secret string }](t, s, ana, "/api/admin/hooks", 2)
		if len(hooks) != 3 || !slices.IsSortedFunc(hooks, func(a, b struct{ ID, Conv, Bot, Secret string }) int { return strings.Compare(a.ID, b.ID) }) {
			t.Errorf("hooks %+v: want 3 in id order", hooks)
		}

		for _, path := range []string{"/api/admin/users", "/api/admin/convs", "/api/admin/exports", "/api/admin/hooks"} {
			s.do("GET", path, ben, nil).want(403, parley.CodePermissionDenied)
			s.do("GET", path+"?after=bm90IGFuIGlk%00", ana, nil).want(400, parley.CodeInvalidArgument)
			s.do("GET", path+"?after=", ana, nil).want(400, parley.CodeInvalidArgument)
		}
		var actions []string
		for _, e := range s.audit(ana) {
			actions = append(actions, e.Action+":"+e.Outcome)
		}
		for _, want := range []string{"user.list:ok", "conv.list:ok", "export.list:ok", "hook.list:ok", "user.list:INVALID_ARGUMENT"} {
			if !slices.Contains(actions, want) {
				t.Errorf("audit log lacks %s: %v", want, actions)
			}
		}
	})
}
