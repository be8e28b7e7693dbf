package storetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/parleychat/parley"
)

// Checks of direct conversations (OpenDirect) and the user directory.

// convCount counts every conversation in the database.
func (e *env) convCount(t *testing.T) int64 {
	t.Helper()
	return e.db.Int(t, "SELECT count(*) FROM conversations")
}

// testDirectOpen: OpenDirect creates the pair's one conversation (id
// DirectID, kind direct, no owner or title, both members from seq 1, the
// caller first), and a second open by either answers it with created
// false; the caller themself, a malformed id, an unknown or disabled user
// are refused and create nothing; CreateConversation cannot take a direct
// id; ids too long for the readable form get the hashed one.
func testDirectOpen(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy")
	ana, ben := ps[0], ps[1]
	e.bystander(t, "off")
	ok(t, e.st.SetUserDisabled(ctx(t), "off", true), "disable off")

	dm, created, err := e.st.OpenDirect(ctx(t), ana, "ben")
	ok(t, err, "open direct")
	id := parley.DirectID("ana", "ben")
	if !created || dm.ID != id || dm.Kind != parley.KindDirect || dm.Owner != "" || dm.Title != "" || dm.Head != 2 || dm.MinSeq != 1 || dm.Epoch != 1 {
		t.Errorf("open direct: %+v created %v; want %s, direct, no owner or title, head 2, min_seq 1, epoch 1, created", dm, created, id)
	}
	for _, p := range []parley.Principal{ana, ben} {
		pg := e.sync(t, p, id, 0, 50)
		wantEvents(t, "direct read by "+p.User, pg.Events, "1 member_joined ana: ana", "2 member_joined ana: ben")
	}
	members, err := e.st.ConvMembers(ctx(t), id)
	ok(t, err, "members")
	if !slices.Equal(members, []string{"ana", "ben"}) {
		t.Errorf("members %v, want [ana ben]", members)
	}
	for _, p := range []parley.Principal{ben, ana} {
		again, created, err := e.st.OpenDirect(ctx(t), p, map[string]string{"ana": "ben", "ben": "ana"}[p.User])
		if wantCode(t, err, "") && (created || again.ID != id || again.Head != 2) {
			t.Errorf("open again by %s: %+v created %v, want the same conversation, not created", p.User, again, created)
		}
	}
	e.send(t, ben, id, "k3", "hi ana") // 3
	if n := e.rows(t, id); n != 3 {
		t.Errorf("%d events, want 3", n)
	}
	_, err = e.st.AddMember(ctx(t), ana, id, "cy")
	wantCode(t, err, parley.CodePermissionDenied)

	before := e.convCount(t)
	for _, tc := range []struct {
		name, user string
		want       parley.Code
	}{
		{"self", "ana", parley.CodeInvalidArgument},
		{"malformed", "Ben", parley.CodeInvalidArgument},
		{"empty", "", parley.CodeInvalidArgument},
		{"unknown", "zed", parley.CodeNotFound},
		{"disabled", "off", parley.CodeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := e.st.OpenDirect(ctx(t), ana, tc.user)
			wantCode(t, err, tc.want)
			if n := e.convCount(t); n != before {
				t.Errorf("a refused open made %d conversations", n-before)
			}
		})
	}
	for _, cid := range []string{parley.DirectID("ana", "cy"), "dm:x", "dmh:0123456789"} {
		_, err := e.st.CreateConversation(ctx(t), ana, parley.NewConversation{ID: cid, Kind: parley.KindGroup, Members: []string{"cy"}})
		wantCode(t, err, parley.CodeInvalidArgument)
		_, err = e.st.CreateConversation(ctx(t), ana, parley.NewConversation{ID: cid, Kind: parley.KindDirect, Members: []string{"cy"}})
		wantCode(t, err, parley.CodeInvalidArgument)
	}
	if n := e.convCount(t); n != before {
		t.Errorf("refused creations made %d conversations", n-before)
	}

	// An existing pair's conversation is not opened with a disabled user.
	_, _, err = e.st.OpenDirect(ctx(t), ana, "cy")
	ok(t, err, "open ana-cy")
	ok(t, e.st.SetUserDisabled(ctx(t), "cy", true), "disable cy")
	_, _, err = e.st.OpenDirect(ctx(t), ana, "cy")
	wantCode(t, err, parley.CodeNotFound)

	long1, long2 := strings.Repeat("l", 32), strings.Repeat("m", 32)
	e.bystander(t, long1)
	e.bystander(t, long2)
	h, created, err := e.st.OpenDirect(ctx(t), as(long2), long1)
	if wantCode(t, err, "") && (!created || h.ID != parley.DirectID(long1, long2) || !strings.HasPrefix(h.ID, "dmh:")) {
		t.Errorf("open direct of long ids: %+v created %v, want %s", h, created, parley.DirectID(long1, long2))
	}
}

// testDirectOpenConcurrent: 20 opens of one pair by both users race on
// separate connections: one conversation, one creation, two members, two
// events, every answer naming it.
func testDirectOpenConcurrent(t *testing.T, e *env) {
	const n = 20
	ps := e.users(t, "ana", "ben")
	stores := make([]parley.Store, 5)
	for i := range stores {
		stores[i] = e.db.Open(t)
	}
	convs := make([]parley.Conversation, n)
	created := make([]bool, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			p, other := ps[i%2], ps[1-i%2].User
			convs[i], created[i], errs[i] = stores[i%len(stores)].OpenDirect(ctx(t), p, other)
		})
	}
	close(start)
	wg.Wait()
	id := parley.DirectID("ana", "ben")
	fresh := 0
	for i := range n {
		if !wantCode(t, errs[i], "") {
			continue
		}
		if created[i] {
			fresh++
		}
		if convs[i].ID != id || convs[i].Head != 2 {
			t.Errorf("open %d: %+v, want %s at head 2", i, convs[i], id)
		}
	}
	if fresh != 1 {
		t.Errorf("%d opens answered created, want exactly 1", fresh)
	}
	for what, q := range map[string]string{
		"conversations": "SELECT count(*) FROM conversations WHERE id = ?",
		"events":        "SELECT count(*) FROM events WHERE conv_id = ?",
		"periods":       "SELECT count(*) FROM periods WHERE conv_id = ?",
	} {
		want := map[string]int64{"conversations": 1, "events": 2, "periods": 2}[what]
		if got := e.db.Int(t, q, id); got != want {
			t.Errorf("%d %s, want %d", got, what, want)
		}
	}
}

// directory walks every page of a directory listing and returns the ids.
func (e *env) directory(t *testing.T, p parley.Principal, q parley.DirectoryQuery) []string {
	t.Helper()
	var ids []string
	for range 1000 {
		page, err := e.st.Directory(ctx(t), p, q)
		ok(t, err, fmt.Sprintf("directory %+v", q))
		if len(page.Items) > q.Limit {
			t.Fatalf("directory %+v: %d items", q, len(page.Items))
		}
		for _, it := range page.Items {
			ids = append(ids, it.ID)
		}
		if !page.HasMore {
			return ids
		}
		if page.Next == "" || page.Next == q.After || len(page.Items) == 0 {
			t.Fatalf("directory %+v: has_more with next %q", q, page.Next)
		}
		q.After = page.Next
	}
	t.Fatalf("directory %+v: no end", q)
	return nil
}

// testDirectoryListing: the directory lists active users whose id or
// email starts with the prefix (case-insensitively; LIKE's wildcards are
// plain characters), by id, paged by keyset (a user created behind the
// cursor is not seen, one ahead of it is, nobody twice); a disabled user
// is left out; bad limits, cursors and prefixes are INVALID_ARGUMENT.
func testDirectoryListing(t *testing.T, e *env) {
	for _, u := range []parley.NewUser{
		{ID: "ana", Email: "zed@example.com"}, {ID: "andy"}, {ID: "ann"},
		{ID: "ben", Email: "andrew@x.test"}, {ID: "bo", Email: "anne@x.test"},
		{ID: "carl", Email: "anchor@corp.test"}, {ID: "dan"}, {ID: "a_b"},
	} {
		_, err := e.st.CreateUser(ctx(t), u)
		ok(t, err, "create "+u.ID)
	}
	ok(t, e.st.SetUserDisabled(ctx(t), "bo", true), "disable bo")
	ana := as("ana")
	list := func(prefix string) []string {
		t.Helper()
		return e.directory(t, ana, parley.DirectoryQuery{Prefix: prefix, Limit: 50})
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"an", []string{"ana", "andy", "ann", "ben", "carl"}},
		{"AN", []string{"ana", "andy", "ann", "ben", "carl"}},
		{" an ", []string{"ana", "andy", "ann", "ben", "carl"}},
		{"ann", []string{"ann"}},
		{"zed", []string{"ana"}},
		{"zed@example.com", []string{"ana"}},
		{"zed@example.comx", nil},
		{"bo", nil},
		{"_", nil},
		{"%", nil},
		{"a_", []string{"a_b"}},
		{"a%", nil},
		{"", []string{"a_b", "ana", "andy", "ann", "ben", "carl", "dan"}},
	} {
		if got := list(tc.prefix); !slices.Equal(got, tc.want) {
			t.Errorf("prefix %q: %q, want %q", tc.prefix, got, tc.want)
		}
	}

	// Keyset paging: users created behind and ahead of the cursor.
	q := parley.DirectoryQuery{Prefix: "a", Limit: 2}
	page, err := e.st.Directory(ctx(t), ana, q)
	ok(t, err, "first page")
	var got []string
	for _, it := range page.Items {
		got = append(got, it.ID)
	}
	if !slices.Equal(got, []string{"a_b", "ana"}) || !page.HasMore || page.Next != parley.AdminCursor("ana") {
		t.Fatalf("first page: %q has_more %v next %q", got, page.HasMore, page.Next)
	}
	for _, id := range []string{"a0", "anz"} {
		_, err := e.st.CreateUser(ctx(t), parley.NewUser{ID: id})
		ok(t, err, "create "+id)
	}
	q.After = page.Next
	got = append(got, e.directory(t, ana, q)...)
	if want := []string{"a_b", "ana", "andy", "ann", "anz", "ben", "carl"}; !slices.Equal(got, want) {
		t.Errorf("walk: %q, want %q", got, want)
	}

	for _, tc := range []struct {
		name string
		q    parley.DirectoryQuery
	}{
		{"limit_0", parley.DirectoryQuery{Limit: 0}},
		{"limit_201", parley.DirectoryQuery{Limit: parley.MaxAdminPage + 1}},
		{"cursor_garbage", parley.DirectoryQuery{Limit: 10, After: "!!"}},
		{"cursor_control", parley.DirectoryQuery{Limit: 10, After: parley.AdminCursor("a\x01")}},
		{"prefix_65", parley.DirectoryQuery{Limit: 10, Prefix: strings.Repeat("a", parley.MaxPrefixChars+1)}},
		{"prefix_invalid_utf8", parley.DirectoryQuery{Limit: 10, Prefix: "a\xff"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.st.Directory(ctx(t), ana, tc.q)
			wantCode(t, err, parley.CodeInvalidArgument)
		})
	}
}

// testDirectoryShared: with Shared, the directory lists only users who
// share a conversation with the caller, both with an open period (a
// former member and a conversation the caller left do not count), the
// caller included; prefix, paging and the disabled filter apply as
// without.
func testDirectoryShared(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy", "dan", "eve", "fay")
	ana, cy, dan, eve := ps[0], ps[2], ps[3], ps[4]
	e.group(t, ana, "c1", "ben", "cy")
	if _, err := e.st.RemoveMember(ctx(t), ana, "c1", "cy"); err != nil {
		t.Fatal(err)
	}
	e.group(t, dan, "c2", "eve")
	e.group(t, eve, "c3", "ana", "fay")
	if _, err := e.st.RemoveMember(ctx(t), ana, "c3", "ana"); err != nil {
		t.Fatal(err)
	}
	shared := func(p parley.Principal, prefix string, limit int) []string {
		t.Helper()
		return e.directory(t, p, parley.DirectoryQuery{Prefix: prefix, Limit: limit, Shared: true})
	}
	for _, tc := range []struct {
		p      parley.Principal
		prefix string
		limit  int
		want   []string
	}{
		{ana, "", 50, []string{"ana", "ben"}},
		{ana, "", 1, []string{"ana", "ben"}},
		{ana, "b", 50, []string{"ben"}},
		{ana, "c", 50, nil},
		{eve, "", 50, []string{"dan", "eve", "fay"}},
		{dan, "", 50, []string{"dan", "eve"}},
	} {
		if got := shared(tc.p, tc.prefix, tc.limit); !slices.Equal(got, tc.want) {
			t.Errorf("shared directory of %s, prefix %q, limit %d: %q, want %q", tc.p.User, tc.prefix, tc.limit, got, tc.want)
		}
	}
	if got := e.directory(t, cy, parley.DirectoryQuery{Prefix: "a", Limit: 50}); !slices.Equal(got, []string{"ana"}) {
		t.Errorf("the whole directory for cy, prefix a: %q", got)
	}
	ok(t, e.st.SetUserDisabled(ctx(t), "ben", true), "disable ben")
	if got := shared(ana, "", 50); !slices.Equal(got, []string{"ana"}) {
		t.Errorf("after ben is disabled: %q, want [ana]", got)
	}
}
