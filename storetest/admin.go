package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// Checks of the operators' listings and the retention claim (store.go,
// parley.Admin).

// walkAdmin pages through a listing with limit and returns every item's id
// in order; it fails on a page over the limit, a cursor that does not move,
// or has_more without a cursor.
func walkAdmin[T any](t *testing.T, what string, limit int, list func(parley.AdminQuery) (parley.AdminPage[T], error), id func(T) string) ([]string, []T) {
	t.Helper()
	var ids []string
	var all []T
	q := parley.AdminQuery{Limit: limit}
	for range 1000 {
		page, err := list(q)
		ok(t, err, fmt.Sprintf("%s after %q", what, q.After))
		if len(page.Items) > limit {
			t.Fatalf("%s: %d items for limit %d", what, len(page.Items), limit)
		}
		for _, it := range page.Items {
			ids = append(ids, id(it))
		}
		all = append(all, page.Items...)
		if !page.HasMore {
			if page.Next != "" {
				t.Errorf("%s: last page with next %q", what, page.Next)
			}
			return ids, all
		}
		if page.Next == "" || page.Next == q.After || len(page.Items) != limit {
			t.Fatalf("%s: has_more with next %q after %q and %d items", what, page.Next, q.After, len(page.Items))
		}
		q.After = page.Next
	}
	t.Fatalf("%s: no end after 1000 pages", what)
	return nil, nil
}

// wantIDs checks that a walk returned exactly want, in byte order, each
// once.
func wantIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: walked %q, want every id once in byte order %q", what, got, want)
	}
}

// testAdminListings: each listing walks every row exactly once in byte
// order of id, for every page size (ids chosen so that byte order and a
// natural-language collation disagree), carries the documented fields, and
// refuses out-of-range limits and foreign cursors with INVALID_ARGUMENT.
func testAdminListings(t *testing.T, e *env) {
	// Users: ana and ben log in (last seen), the rest are bystanders.
	began := time.Now()
	ana := e.member(t, "ana")
	ben := e.member(t, "ben")
	users := []string{"ana", "ben"}
	for _, id := range []string{"a-b", "a_b", "a.b", "ab", "b0", "bot", "z9", "0x"} {
		e.bystander(t, id)
		users = append(users, id)
	}
	ok(t, e.st.SetUserDisabled(ctx(t), "z9", true), "disable z9")

	// Conversations: members, head and retention differ.
	convs := []string{"c-A", "c-a", "c_a", "c.a", "c:a", "c-b"}
	for i, id := range convs {
		members := []string{"ben", "bot"}[:i%3]
		e.group(t, ana, id, members...)
	}
	e.send(t, ana, "c-b", "m1", "hello")
	ok(t, e.st.SetRetention(ctx(t), "c-a", parley.Retention{MaxAge: 90 * time.Minute, KeepLast: 7}), "set retention")
	_, err := e.st.RemoveMember(ctx(t), ana, "c_a", "ben")
	ok(t, err, "remove ben")

	// Hooks and export jobs.
	var hooks []string
	for range 3 {
		h, err := e.st.CreateHook(ctx(t), parley.NewHook{Conv: "c-a", Bot: "ben", CreatedBy: "ana"})
		ok(t, err, "create hook")
		hooks = append(hooks, h.ID)
	}
	var jobs []string
	for i := range 3 {
		j, err := e.st.CreateExport(ctx(t), ben, parley.ExportRequest{Key: fmt.Sprintf("k%d", i), Scope: parley.ExportScopeAll})
		ok(t, err, "create export")
		jobs = append(jobs, j.ID)
	}
	revoked, err := e.st.RevokeExport(ctx(t), jobs[1])
	ok(t, err, "revoke export")

	for _, st := range []struct {
		name string
		st   parley.Store
	}{{"store", e.st}, {"second_store", e.db.Open(t)}} {
		for _, limit := range []int{1, 2, 3, parley.MaxAdminPage} {
			what := fmt.Sprintf("%s limit %d", st.name, limit)
			ids, us := walkAdmin(t, "users "+what, limit, func(q parley.AdminQuery) (parley.AdminPage[parley.AdminUser], error) {
				return st.st.AdminUsers(ctx(t), q)
			},
				func(u parley.AdminUser) string { return u.ID })
			wantIDs(t, "users "+what, ids, users)
			for _, u := range us {
				seen := u.ID == "ana" || u.ID == "ben"
				if seen != !u.LastSeen.IsZero() || (seen && !within(u.LastSeen, began, time.Now())) {
					t.Errorf("user %s: last seen %v; want a time since the logins iff the user has a token", u.ID, u.LastSeen)
				}
				if u.Disabled != (u.ID == "z9") || u.Role != parley.RoleUser {
					t.Errorf("user %s: disabled %v role %q", u.ID, u.Disabled, u.Role)
				}
			}

			ids, cs := walkAdmin(t, "convs "+what, limit, func(q parley.AdminQuery) (parley.AdminPage[parley.AdminConv], error) {
				return st.st.AdminConvs(ctx(t), q)
			},
				func(c parley.AdminConv) string { return c.ID })
			wantIDs(t, "convs "+what, ids, convs)
			for _, c := range cs {
				want := e.conv(t, c.ID)
				members := e.db.Int(t, "SELECT count(*) FROM periods WHERE conv_id = ? AND to_seq IS NULL", c.ID)
				if c.Conversation != want || c.Members != members {
					t.Errorf("conv %s: %+v members %d; want %+v members %d", c.ID, c.Conversation, c.Members, want, members)
				}
			}
			if c := cs[slices.IndexFunc(cs, func(c parley.AdminConv) bool { return c.ID == "c_a" })]; c.Members != 2 {
				t.Errorf("conv c_a (ana, ben, bot) after removing ben: %d members, want 2", c.Members)
			}

			ids, js := walkAdmin(t, "exports "+what, limit, func(q parley.AdminQuery) (parley.AdminPage[parley.AdminExport], error) {
				return st.st.AdminExports(ctx(t), q)
			}, func(j parley.AdminExport) string { return j.ID })
			wantIDs(t, "exports "+what, ids, jobs)
			for _, j := range js {
				if j.User != "ben" || j.Scope != parley.ExportScopeAll {
					t.Errorf("job %s: user %q scope %q", j.ID, j.User, j.Scope)
				}
				if j.ID == revoked.ID {
					if j.State != parley.ExportRevoked || !within(j.FinishedAt, began, time.Now()) {
						t.Errorf("revoked job: state %s finished %v", j.State, j.FinishedAt)
					}
				} else if j.State != parley.ExportQueued || !j.FinishedAt.IsZero() {
					t.Errorf("queued job %s: state %s finished %v, want no finish time", j.ID, j.State, j.FinishedAt)
				}
			}

			ids, hs := walkAdmin(t, "hooks "+what, limit, func(q parley.AdminQuery) (parley.AdminPage[parley.Hook], error) { return st.st.AdminHooks(ctx(t), q) },
				func(h parley.Hook) string { return h.ID })
			wantIDs(t, "hooks "+what, ids, hooks)
			for _, h := range hs {
				if h.Secret != "" || h.Conv != "c-a" || h.Bot != "ben" || h.CreatedBy != "ana" || h.CreatedAt.IsZero() {
					t.Errorf("hook %+v: want its fields without the secret", h)
				}
			}
		}
	}

	// The cursor is opaque but names an id: a page after "b0" starts at "ben".
	page, err := e.st.AdminUsers(ctx(t), parley.AdminQuery{After: parley.AdminCursor("b0"), Limit: 1})
	ok(t, err, "users after b0")
	if len(page.Items) != 1 || page.Items[0].ID != "ben" || !page.HasMore {
		t.Errorf("users after b0: %+v", page)
	}

	for _, tc := range []struct {
		name string
		q    parley.AdminQuery
	}{
		{"limit_zero", parley.AdminQuery{}},
		{"limit_negative", parley.AdminQuery{Limit: -1}},
		{"limit_over_max", parley.AdminQuery{Limit: parley.MaxAdminPage + 1}},
		{"cursor_not_base64", parley.AdminQuery{Limit: 1, After: "not a cursor!"}},
		{"cursor_padding", parley.AdminQuery{Limit: 1, After: "YW5h=="}},
		{"cursor_control_bytes", parley.AdminQuery{Limit: 1, After: parley.AdminCursor("a\x00b")}},
		{"cursor_too_long", parley.AdminQuery{Limit: 1, After: parley.AdminCursor(string(make([]byte, 65)))}},
	} {
		t.Run("bounds_"+tc.name, func(t *testing.T) {
			_, err := e.st.AdminUsers(ctx(t), tc.q)
			wantCode(t, err, parley.CodeInvalidArgument)
			_, err = e.st.AdminConvs(ctx(t), tc.q)
			wantCode(t, err, parley.CodeInvalidArgument)
			_, err = e.st.AdminExports(ctx(t), tc.q)
			wantCode(t, err, parley.CodeInvalidArgument)
			_, err = e.st.AdminHooks(ctx(t), tc.q)
			wantCode(t, err, parley.CodeInvalidArgument)
		})
	}
}

// testRetentionClaimRounds: ClaimRetention returns the conversations with
// a policy, each once per round however many stores on the database claim
// at the same time; the next round claims them again; bounds are
// INVALID_ARGUMENT and claim nothing.
func testRetentionClaimRounds(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	var policy []string
	for i := range 24 {
		id := fmt.Sprintf("c-%02d", i)
		e.group(t, ana, id)
		switch i % 3 {
		case 0:
			ok(t, e.st.SetRetention(ctx(t), id, parley.Retention{KeepLast: 5}), "set retention")
			policy = append(policy, id)
		case 1:
			ok(t, e.st.SetRetention(ctx(t), id, parley.Retention{MaxAge: time.Hour}), "set retention")
			policy = append(policy, id)
		}
	}
	// A policy set and cleared again is no policy.
	ok(t, e.st.SetRetention(ctx(t), "c-02", parley.Retention{KeepLast: 1}), "set retention")
	ok(t, e.st.SetRetention(ctx(t), "c-02", parley.Retention{}), "clear retention")

	for _, tc := range []struct {
		name  string
		every time.Duration
		limit int
	}{
		{"every_zero", 0, 10},
		{"every_sub_ms", time.Microsecond, 10},
		{"limit_zero", time.Hour, 0},
		{"limit_over_max", time.Hour, parley.MaxAdminPage + 1},
	} {
		t.Run("bounds_"+tc.name, func(t *testing.T) {
			_, err := e.st.ClaimRetention(ctx(t), tc.every, tc.limit)
			wantCode(t, err, parley.CodeInvalidArgument)
			if n := e.db.Int(t, "SELECT count(*) FROM retention_runs"); n != 0 {
				t.Errorf("a refused claim wrote %d rows", n)
			}
		})
	}

	// Three stores (three gateways) claim at once, in small batches, until
	// each finds nothing: together they claim every conversation with a
	// policy exactly once.
	claim := func(stores []parley.Store) []string {
		t.Helper()
		var mu sync.Mutex
		var got []string
		var wg sync.WaitGroup
		for _, st := range stores {
			wg.Go(func() {
				for {
					ids, err := st.ClaimRetention(ctx(t), time.Hour, 3)
					if err != nil {
						t.Errorf("claim: %v", err)
						return
					}
					if len(ids) > 3 || !slices.IsSorted(ids) {
						t.Errorf("claim returned %q: want at most 3 in id order", ids)
					}
					mu.Lock()
					got = append(got, ids...)
					mu.Unlock()
					if len(ids) == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		slices.Sort(got)
		return got
	}
	stores := []parley.Store{e.st, e.db.Open(t), e.db.Open(t)}
	wantIDs(t, "first round", claim(stores), policy)
	wantIDs(t, "same round again", claim(stores), nil)

	// The next round (moved here by rewinding the recorded rounds) claims
	// them all again, once.
	e.db.Exec(t, "UPDATE retention_runs SET round_start = round_start - 3600000")
	wantIDs(t, "next round", claim(stores), policy)

	// A changed interval still compares (the rounds are times, not
	// numbers): after claims with a 1ms round, a 1h round claims again
	// once the database clock is in a later hour (moved here by two hours).
	got, err := e.st.ClaimRetention(ctx(t), time.Millisecond, parley.MaxAdminPage)
	ok(t, err, "claim with a 1ms round")
	wantIDs(t, "a shorter interval", got, policy)
	e.db.Exec(t, "UPDATE retention_runs SET round_start = round_start - 7200000")
	got, err = e.st.ClaimRetention(ctx(t), time.Hour, parley.MaxAdminPage)
	ok(t, err, "claim with a 1h round")
	wantIDs(t, "back to a longer interval", got, policy)
}
