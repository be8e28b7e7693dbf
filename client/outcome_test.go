package client_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/wire"
)

// TestUnrecordedOutcomeResent: when the reply arrives but its outcome
// cannot be written (here a trigger refuses the outbox update, as a full
// disk would), the item is still pending in the file; the client must end
// the connection so the next one resends it, rather than keep a connection
// whose pump has moved past the item (it would wait for some unrelated
// disconnect). The resend is answered as a replay and recorded once.
func TestUnrecordedOutcomeResent(t *testing.T) {
	f := newFake(t)
	f.add("c1", 1)
	file := filepath.Join(t.TempDir(), "o.db")
	url := f.listen()
	r := start(t, client.Options{URLs: []string{url}, Token: "tok", Outbox: file})
	r.waitConnected(t)

	raw, err := sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	if _, err := raw.Exec(`CREATE TRIGGER full_disk BEFORE UPDATE ON outbox BEGIN SELECT RAISE(ABORT, 'disk full'); END`); err != nil {
		t.Fatal(err)
	}
	var sends atomic.Int32
	f.setHook(func(_ *websocket.Conn, req wire.Request) bool {
		if req.T == wire.TSend && sends.Add(1) == 2 {
			if _, err := raw.Exec(`DROP TRIGGER full_disk`); err != nil {
				t.Error(err)
			}
		}
		return false // answer as usual
	})

	it, err := r.Send(ctxT(t), "c1", "once")
	if err != nil {
		t.Fatalf("send: %v (the item was never resent)", err)
	}
	if it.Seq != 2 || !it.Dup {
		t.Errorf("outcome %+v, want seq 2 recorded from the replay (dup)", it)
	}
	if n := sends.Load(); n != 2 {
		t.Errorf("%d sends, want 2 (the original and one resend)", n)
	}
	if o := <-r.outcomes; o.CMID != it.CMID {
		t.Errorf("outcome %+v", o)
	}
	select {
	case o := <-r.outcomes:
		t.Errorf("a second outcome: %+v", o)
	default:
	}
}

// TestEnqueueWriteNotCut: ctx is checked before the outbox write, never in
// its middle. A cancelled ctx writes nothing; a ctx that ends while the
// write waits for the file (another connection holds the write lock) still
// writes the item, returns it and wakes the pump, which sends it. Before,
// a cancel mid-write could leave the row written, report an error and skip
// the wake-up: the item then sat unsent until the next connection.
func TestEnqueueWriteNotCut(t *testing.T) {
	f := newFake(t)
	f.add("c1", 1)
	file := filepath.Join(t.TempDir(), "o.db")
	r := start(t, client.Options{URLs: []string{f.listen()}, Token: "tok", Outbox: file})
	r.waitConnected(t)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Enqueue(cancelled, "c1", "never"); err == nil {
		t.Fatal("Enqueue with a cancelled ctx succeeded")
	}
	if p, _ := r.Pending(ctxT(t)); len(p) != 0 {
		t.Fatalf("pending %+v after a refused Enqueue", p)
	}

	raw, err := sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	raw.SetMaxOpenConns(1)
	lock, err := raw.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(`INSERT INTO cursors (conv, after, epoch) VALUES ('lock', 0, 1)`); err != nil {
		t.Fatal(err)
	}
	ctx, cancelWrite := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancelWrite)
	time.AfterFunc(300*time.Millisecond, func() { lock.Rollback() })
	it, err := r.Enqueue(ctx, "c1", "written")
	if err != nil {
		t.Fatalf("Enqueue whose ctx ended during the write: %v", err)
	}
	select {
	case o := <-r.outcomes:
		if o.CMID != it.CMID || o.Seq != 2 {
			t.Errorf("outcome %+v, want %s at seq 2", o, it.CMID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the item was written but never sent")
	}
}
