package client_test

import (
	"database/sql"
	"path/filepath"
	"sync/atomic"
	"testing"

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
