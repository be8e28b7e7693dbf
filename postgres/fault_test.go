package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/fault"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/storetest"
)

// TestFaultPoints arms the store's fault points, store.before_commit
// included, which runs the send's or recall's one statement inside an
// explicit transaction. It must not call t.Parallel: the points are armed
// for the whole test binary.
func TestFaultPoints(t *testing.T) {
	pgtest.Server(t)
	storetest.RunFaults(t, backend{})
}

// TestFaultPointsOnTheFunction: the store's fault points act on the
// statement production runs, not on a copy of its steps. PostgreSQL counts
// the function calls (track_functions): with store.before_insert armed, a
// send and a recall fail before calling parley_send_many or parley_recall;
// with store.before_commit armed, they call them once each and the fault
// then rolls their writes back. Not parallel: the points are armed for the
// whole test binary.
func TestFaultPointsOnTheFunction(t *testing.T) {
	t.Cleanup(func() { fault.Arm("") })
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	db, err := postgres.Open(ctx, pgtest.TrackCalls(dsn), parley.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, u := range []string{"ana", "ben"} {
		if _, err := db.CreateUser(ctx, parley.NewUser{ID: u, Password: "password-" + u}); err != nil {
			t.Fatal(err)
		}
	}
	ana := parley.Principal{User: "ana", DeviceID: "phone", InstallID: "i1"}
	if _, err := db.CreateConversation(ctx, ana, parley.NewConversation{ID: "c-f", Kind: parley.KindGroup, Title: "t", Members: []string{"ben"}}); err != nil {
		t.Fatal(err)
	}
	target, err := db.Send(ctx, ana, parley.SendRequest{Conv: "c-f", CMID: "k1", Body: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, point := range []string{fault.StoreBeforeInsert, fault.StoreBeforeCommit} {
		if err := fault.Arm(point + "=unavailable"); err != nil {
			t.Fatal(err)
		}
		_, err := db.Send(ctx, ana, parley.SendRequest{Conv: "c-f", CMID: "k2", Body: "m2"})
		_, rerr := db.Recall(ctx, ana, parley.RecallRequest{Conv: "c-f", Target: target.Seq, CMID: "r1"})
		fault.Arm("")
		if parley.ErrorCode(err) != parley.CodeUnavailable || parley.ErrorCode(rerr) != parley.CodeUnavailable {
			t.Fatalf("%s: send %v, recall %v; want UNAVAILABLE", point, err, rerr)
		}
	}
	db.Close() // its sessions end and report their counts

	conn, err := pgx.Connect(ctx, pgtest.Libpq(dsn))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM events WHERE conv_id = 'c-f' AND cmid IN ('k2', 'r1')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d events of the failed calls committed, want 0", n)
	}
	pgtest.WaitCalls(t, dsn, "parley_send_many", 2) // k1, and k2 at store.before_commit
	pgtest.WaitCalls(t, dsn, "parley_recall", 1)    // r1 at store.before_commit
}
