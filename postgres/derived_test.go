package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
)

// openChat opens a store on dsn with users ana and ben and their group
// c-x, whose first message (seq 3, ana's) it returns.
func openChat(t *testing.T, dsn string) (*postgres.DB, parley.Principal, parley.Sent) {
	t.Helper()
	ctx := context.Background()
	db, err := postgres.Open(ctx, dsn, parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, u := range []string{"ana", "ben"} {
		if _, err := db.CreateUser(ctx, parley.NewUser{ID: u, Password: "password-" + u}); err != nil {
			t.Fatal(err)
		}
	}
	ana := parley.Principal{User: "ana", DeviceID: "phone", InstallID: "i1"}
	if _, err := db.CreateConversation(ctx, ana, parley.NewConversation{ID: "c-x", Kind: parley.KindGroup, Members: []string{"ben"}}); err != nil {
		t.Fatal(err)
	}
	root, err := db.Send(ctx, ana, parley.SendRequest{Conv: "c-x", CMID: "root", Body: "root"})
	if err != nil {
		t.Fatal(err)
	}
	return db, ana, root
}

// A batch that mixes plain sends with a reply and a mention commits in
// item order with consecutive seqs: the plain runs through
// parley_send_many (one call per run), the others in transactions of
// their own, with the reply's root and the mentions stored.
func TestSendBatchMixedPaths(t *testing.T) {
	dsn := pgtest.DSN(t)
	db, ana, root := openChat(t, pgtest.TrackCalls(dsn))
	ctx := context.Background()
	reqs := []parley.SendRequest{
		{Conv: "c-x", CMID: "p1", Body: "plain one"},
		{Conv: "c-x", CMID: "p2", Body: "plain two"},
		{Conv: "c-x", CMID: "r1", Body: "a reply", ReplyTo: root.Seq},
		{Conv: "c-x", CMID: "m1", Body: "hi @ben"},
		{Conv: "c-x", CMID: "p3", Body: "plain three"},
	}
	items := make([]parley.BatchSend, len(reqs))
	for i, r := range reqs {
		items[i] = parley.BatchSend{P: ana, Req: r}
	}
	out := db.SendBatch(ctx, items)
	for i, res := range out {
		if res.Err != nil || res.Sent.Dup || res.Sent.Seq != root.Seq+1+int64(i) || res.Sent.At.IsZero() {
			t.Fatalf("item %d: %+v; want new, seq %d, with its time", i, res, root.Seq+1+int64(i))
		}
	}
	ev, err := db.Fetch(ctx, ana, "c-x", out[2].Sent.Seq)
	if err != nil || ev.ReplyTo != root.Seq {
		t.Fatalf("the reply: %+v, %v; want reply_to %d", ev, err, root.Seq)
	}
	ev, err = db.Fetch(ctx, ana, "c-x", out[3].Sent.Seq)
	if err != nil || len(ev.Mentions) != 1 || ev.Mentions[0] != "ben" {
		t.Fatalf("the mention: %+v, %v; want mentions [ben]", ev, err)
	}
	// Replays take their own path again and answer the original.
	again := db.SendBatch(ctx, items[2:4])
	for i, res := range again {
		if res.Err != nil || !res.Sent.Dup || res.Sent.Seq != out[2+i].Sent.Seq {
			t.Fatalf("replay %d: %+v; want dup of seq %d", i, res, out[2+i].Sent.Seq)
		}
	}
	db.Close()
	pgtest.WaitCalls(t, dsn, "parley_send_many", 3) // root, [p1 p2], [p3]
}

// The Go-side writes honour the store's fault points as Recall does: with
// store.before_commit armed, an edit, a reaction and a reply fail with
// UNAVAILABLE and nothing of them commits. Not parallel: the points are
// armed for the whole test binary.
func TestChatWritesFaultPoints(t *testing.T) {
	t.Cleanup(func() { fault.Arm("") })
	dsn := pgtest.DSN(t)
	db, ana, root := openChat(t, dsn)
	ctx := context.Background()
	for _, point := range []string{fault.StoreBeforeInsert, fault.StoreBeforeCommit} {
		if err := fault.Arm(point + "=unavailable"); err != nil {
			t.Fatal(err)
		}
		_, eerr := db.Edit(ctx, ana, parley.EditRequest{Conv: "c-x", Target: root.Seq, CMID: "e1", Body: "new @ben"})
		_, rerr := db.React(ctx, ana, parley.ReactRequest{Conv: "c-x", Target: root.Seq, CMID: "x1", Emoji: "👍", On: true})
		_, serr := db.Send(ctx, ana, parley.SendRequest{Conv: "c-x", CMID: "s1", Body: "re", ReplyTo: root.Seq})
		fault.Arm("")
		for _, err := range []error{eerr, rerr, serr} {
			if parley.ErrorCode(err) != parley.CodeUnavailable {
				t.Fatalf("%s: %v; want UNAVAILABLE", point, err)
			}
		}
	}
	conn, err := pgx.Connect(ctx, pgtest.Libpq(dsn))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var events, reactions, mentions, head int64
	if err := conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM events WHERE conv_id = 'c-x' AND cmid IN ('e1', 'x1', 's1')),
		(SELECT count(*) FROM reactions), (SELECT count(*) FROM mentions),
		(SELECT next_seq - 1 FROM conversations WHERE id = 'c-x')`).Scan(&events, &reactions, &mentions, &head); err != nil {
		t.Fatal(err)
	}
	if events != 0 || reactions != 0 || mentions != 0 || head != root.Seq {
		t.Fatalf("after the faults: %d events, %d reactions rows, %d mentions rows, head %d; want none and head %d",
			events, reactions, mentions, head, root.Seq)
	}
}

// Rule 2 for a former member: ben reads the message as it stood at his
// last visible seq (the edit, the reaction and the reply after his leave
// are filtered out in the query), in Sync, Fetch and Versions alike.
func TestDerivedFormerMember(t *testing.T) {
	db, ana, root := openChat(t, pgtest.DSN(t))
	ctx := context.Background()
	ben := parley.Principal{User: "ben", DeviceID: "tab", InstallID: "i1"}
	if _, err := db.React(ctx, ben, parley.ReactRequest{Conv: "c-x", Target: root.Seq, CMID: "x1", Emoji: "👍", On: true}); err != nil {
		t.Fatal(err)
	}
	left, err := db.RemoveMember(ctx, ana, "c-x", "ben")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.React(ctx, ana, parley.ReactRequest{Conv: "c-x", Target: root.Seq, CMID: "x2", Emoji: "👍", On: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Edit(ctx, ana, parley.EditRequest{Conv: "c-x", Target: root.Seq, CMID: "e1", Body: "edited"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Send(ctx, ana, parley.SendRequest{Conv: "c-x", CMID: "r1", Body: "reply", ReplyTo: root.Seq}); err != nil {
		t.Fatal(err)
	}
	want := parley.Derived{AsOf: left.Seq, Reactions: []parley.Reaction{{Emoji: "👍", Count: 1, Me: true}}}
	check := func(name string, ev parley.Event) {
		t.Helper()
		if ev.Body != "root" || ev.Derived == nil || ev.Derived.AsOf != want.AsOf || ev.Derived.EditSeq != 0 ||
			ev.Derived.Replies != 0 || len(ev.Derived.Reactions) != 1 || ev.Derived.Reactions[0] != want.Reactions[0] {
			t.Errorf("%s: body %q, %+v; want the original and %+v", name, ev.Body, ev.Derived, want)
		}
	}
	page, err := db.Sync(ctx, ben, parley.SyncRequest{Conv: "c-x", After: root.Seq - 1, Limit: 10})
	if err != nil || len(page.Events) == 0 {
		t.Fatalf("sync: %+v, %v", page, err)
	}
	check("sync", page.Events[0])
	ev, err := db.Fetch(ctx, ben, "c-x", root.Seq)
	if err != nil {
		t.Fatal(err)
	}
	check("fetch", ev)
	vs, recalled, err := db.Versions(ctx, ben, "c-x", root.Seq)
	if err != nil || recalled || len(vs) != 1 || vs[0].Body != "root" {
		t.Fatalf("versions: %+v, %v, %v; want the original only", vs, recalled, err)
	}
	// ana, a member, sees all of it.
	ev, err = db.Fetch(ctx, ana, "c-x", root.Seq)
	if err != nil || ev.Body != "edited" || ev.Derived.Replies != 1 || ev.Derived.Reactions[0].Count != 2 {
		t.Fatalf("ana's fetch: %q %+v, %v", ev.Body, ev.Derived, err)
	}
}
