package main

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestSendMetrics: /metrics reports the store's group commit — every send
// that reached the store counted once in parley_send_batched_total, in at
// least one and at most that many batches — and the fan-out's counters
// (carried pushes, membership reads) exist from the start.
func TestSendMetrics(t *testing.T) {
	backends(t, func(t *testing.T, b backend) {
		s := b.store(t)
		tok := seed(t, s, "ana/phone", "ben/phone")
		p := serve(t, b.db, b.dir)
		for _, name := range []string{"parley_send_batches_total", "parley_send_batched_total", "parley_ws_carried_total",
			"parley_ws_member_reads_total", "parley_ws_roster_lost_total", "parley_ws_waves_total", "parley_ws_waves_lingered_total"} {
			if got := counter(t, p, name); got != 0 {
				t.Errorf("%s = %d before any send, want 0", name, got)
			}
		}

		benRec := newRecorder()
		dial(t, filepath.Join(t.TempDir(), "ben.outbox"), tok["ben/phone"], benRec, p.ws)
		benRec.waitConnected(t)
		ana, _ := dial(t, filepath.Join(t.TempDir(), "ana.outbox"), tok["ana/phone"], newRecorder(), p.ws)
		const n = 20
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var cmids []string
		for i := range n {
			it, err := ana.Enqueue(ctx, "g1", "m-"+strconv.Itoa(i))
			if err != nil {
				t.Fatal(err)
			}
			cmids = append(cmids, it.CMID)
		}
		for _, c := range cmids {
			if got, err := ana.Wait(ctx, c); err != nil || got.Code != "" {
				t.Fatalf("send %s: %+v, %v", c, got, err)
			}
		}
		benRec.waitFor(t, 10*time.Second, "every message at ben", func() bool { return len(benRec.bodies("g1")) == n })

		batches, sends := counter(t, p, "parley_send_batches_total"), counter(t, p, "parley_send_batched_total")
		if sends != n || batches < 1 || batches > n {
			t.Errorf("%d sends in %d batches, want %d sends in 1..%d batches", sends, batches, n, n)
		}
		if waves, writes := counter(t, p, "parley_ws_waves_total"), counter(t, p, "parley_ws_socket_writes_total"); waves < 1 || writes < waves {
			t.Errorf("parley_ws_waves_total = %d, parley_ws_socket_writes_total = %d after pushes to ben; want at least one wave and a write per wave", waves, writes)
		}
		if got := counter(t, p, "parley_ws_member_reads_total"); got < 1 {
			t.Errorf("parley_ws_member_reads_total = %d after pushes to ben, want at least the first read", got)
		}
	})
}

// counter is an unlabelled series of p's /metrics.
func counter(t *testing.T, p *proc, name string) int {
	t.Helper()
	v, err := metricValue(context.Background(), p.http, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
