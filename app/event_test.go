package app_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/app"
	"github.com/parleychat/parley/config"
	"github.com/parleychat/parley/sqlite"
)

// service is a Service on a real SQLite store under the policy text, with
// ana, bob and cy, the group g of ana and bob, and the notices it
// published.
type service struct {
	*app.Service
	store   *sqlite.DB
	mu      sync.Mutex
	notices []parley.Notice
}

var ana, bob = parley.Principal{User: "ana", DeviceID: "d1"}, parley.Principal{User: "bob", DeviceID: "d1"}

func newService(t *testing.T, policy string) *service {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "parley.db"), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg, _, err := config.Parse([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	s := &service{store: st}
	s.Service = app.New(app.Options{Store: st, Config: func() *config.Config { return cfg }, Publish: func(n parley.Notice) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.notices = append(s.notices, n)
	}})
	for _, u := range []string{"ana", "bob", "cy"} {
		if _, err := st.CreateUser(ctx, parley.NewUser{ID: u}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.CreateConversation(ctx, ana, parley.NewConversation{ID: "g", Title: "g", Members: []string{"bob"}}); err != nil {
		t.Fatal(err)
	}
	return s
}

// published returns the notices published since the last call.
func (s *service) published() []parley.Notice {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.notices
	s.notices = nil
	return out
}

func ids(ns []parley.Notice) string {
	var out []string
	for _, n := range ns {
		out = append(out, fmt.Sprintf("%s/%d/%s", n.Conv, n.Seq, n.User))
	}
	return fmt.Sprint(out)
}

// TestPolicyPerRequest: the use cases fill the policy fields of a request
// from the configuration in force: the @all limit of sends and edits, the
// edit window.
func TestPolicyPerRequest(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		policy   string
		mentions string
	}{
		{"{}", "[bob]"},
		{"mention_all_max: 0", "[]"},
		{"mention_all_max: 1", "[]"}, // g has two members
	} {
		s := newService(t, tc.policy)
		sent, err := s.Send(ctx, app.HTTP, ana, parley.SendRequest{Conv: "g", CMID: "m1", Body: "@all hi"})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := s.Fetch(ctx, bob, "g", sent.Seq)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(ev.Mentions); got != tc.mentions {
			t.Errorf("%s: @all mentions %s, want %s", tc.policy, got, tc.mentions)
		}
	}

	s := newService(t, "edit_window: 1ms")
	sent, err := s.Send(ctx, app.HTTP, ana, parley.SendRequest{Conv: "g", CMID: "m1", Body: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	_, err = s.Edit(ctx, ana, parley.EditRequest{Conv: "g", Target: sent.Seq, CMID: "e1", Body: "late"})
	if parley.ErrorCode(err) != parley.CodeEditWindowExpired {
		t.Errorf("edit after the window: %v", err)
	}
}

// TestChatNotices: every write that makes an event publishes its (conv,
// seq) after the commit; a reaction whose state already held and never
// was set publishes nothing; a direct conversation announces its two
// joins only when it is created.
func TestChatNotices(t *testing.T) {
	ctx := context.Background()
	s := newService(t, "{}")
	sent, err := s.Send(ctx, app.HTTP, ana, parley.SendRequest{Conv: "g", CMID: "m1", Body: "hi @bob"})
	if err != nil {
		t.Fatal(err)
	}
	if ns := s.published(); len(ns) != 1 || ns[0].Event != nil || ns[0].Seq != sent.Seq {
		t.Errorf("a send with a mention published %v, want ids only", ns)
	}
	ed, err := s.Edit(ctx, ana, parley.EditRequest{Conv: "g", Target: sent.Seq, CMID: "e1", Body: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	re, err := s.React(ctx, bob, parley.ReactRequest{Conv: "g", Target: sent.Seq, Emoji: "👍", On: true, CMID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.React(ctx, bob, parley.ReactRequest{Conv: "g", Target: sent.Seq, Emoji: "🎉", On: false, CMID: "r2"}); err != nil {
		t.Fatal(err)
	}
	if got, want := ids(s.published()), fmt.Sprintf("[g/%d/ g/%d/]", ed.Seq, re.Seq); got != want {
		t.Errorf("edit and reactions published %s, want %s", got, want)
	}
	vs, recalled, err := s.Versions(ctx, bob, "g", sent.Seq)
	if err != nil || recalled || len(vs) != 2 || vs[1].Body != "hello" {
		t.Errorf("versions: %+v %v %v", vs, recalled, err)
	}

	c, created, err := s.OpenDirect(ctx, ana, "cy")
	if err != nil || !created {
		t.Fatalf("open: %+v %v %v", c, created, err)
	}
	if got, want := ids(s.published()), fmt.Sprintf("[%s/1/ana %s/2/cy]", c.ID, c.ID); got != want {
		t.Errorf("a new direct conversation published %s, want %s", got, want)
	}
	if _, created, err := s.OpenDirect(ctx, parley.Principal{User: "cy"}, "ana"); err != nil || created {
		t.Fatalf("open again: %v %v", created, err)
	}
	if ns := s.published(); len(ns) != 0 {
		t.Errorf("an existing direct conversation published %v", ns)
	}
}

// TestDirectoryPolicy: directory: shared lists only people who share a
// conversation with the caller.
func TestDirectoryPolicy(t *testing.T) {
	ctx := context.Background()
	for policy, want := range map[string][]string{"{}": {"ana", "bob", "cy"}, "directory: shared": {"ana", "bob"}} {
		s := newService(t, policy)
		page, err := s.Directory(ctx, bob, parley.DirectoryQuery{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, u := range page.Items {
			got = append(got, u.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", policy, got, want)
		}
	}
}
