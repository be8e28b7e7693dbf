package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parleychat/parley/postgres/pgtest"
)

// TestPostgresCrashAfterCommit: on PostgreSQL every attempt of a send is
// one call of parley_send_many, the statement production runs, whatever
// fault points are armed; the points act on that call. A real `parley
// serve` runs with store.before_commit=unavailable@1 and
// api.after_send_commit=crash: the first attempt calls the function and is
// rolled back at store.before_commit (the client is told UNAVAILABLE and
// resends with the same key); the second calls it and commits, and the
// server SIGKILLs itself right after that commit, before the reply. A new
// server answers the client's resend with the same key as a replay of the
// original seq. The conversation holds exactly one event for the key, and
// PostgreSQL (track_functions) counted each attempt as a call of the
// function: two before the crash, three after the resend. Were a store
// fault point to divert sends from the function, the counts would fall
// short.
func TestPostgresCrashAfterCommit(t *testing.T) {
	t.Parallel()
	b := backend{name: "postgres", db: pgtest.DSN(t), dir: t.TempDir()}
	s := b.store(t)
	tok := seed(t, s, "ana/phone")["ana/phone"]
	tracked := pgtest.TrackCalls(b.db)
	outbox := filepath.Join(t.TempDir(), "ana.outbox")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	p := serve(t, tracked, b.dir, "PARLEY_FAULTS=store.before_commit=unavailable@1,api.after_send_commit=crash")
	c, stop := dial(t, outbox, tok, nil, p.ws)
	it, err := c.Enqueue(ctx, "g1", "after commit")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.waitExit(30 * time.Second); !killedBySIGKILL(err) {
		t.Fatalf("server ended with %v, want death by SIGKILL at the fault point", err)
	}
	if marker := "fault: api.after_send_commit: crash"; !strings.Contains(p.stderr(), marker) {
		t.Fatalf("the server log lacks %q: it did not die at the fault point\n%s", marker, p.stderr())
	}
	stop()
	if n := count(messages(t, s), "after commit"); n != 1 {
		t.Fatalf("%d events after the crash, want the 1 committed before it", n)
	}
	// The attempt rolled back at store.before_commit and the one that
	// committed: both calls of the function.
	pgtest.WaitCalls(t, b.db, "parley_send_many", 2)

	p2 := serve(t, tracked, b.dir)
	c2, _ := dial(t, outbox, tok, nil, p2.ws)
	got, err := c2.Wait(ctx, it.CMID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Code != "" || !got.Dup || got.Seq != 3 {
		t.Fatalf("resend after the crash: %+v, want a replay of seq 3", got)
	}
	if n := count(messages(t, s), "after commit"); n != 1 {
		t.Fatalf("%d events after the resend, want exactly 1", n)
	}
	p2.kill() // its sessions end and report their counts
	pgtest.WaitCalls(t, b.db, "parley_send_many", 3)
}
