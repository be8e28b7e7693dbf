package sendqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/sendqueue"
)

// heldRun is a batch runner whose first batch waits for release, so the
// test knows which callers queue behind the leader. It numbers items in
// the order it runs them, as a store gives seqs.
type heldRun struct {
	release chan struct{}
	started chan struct{}
	mu      sync.Mutex
	batches [][]string // cmids per batch
	next    int64
}

func (h *heldRun) run(ctx context.Context, items []parley.BatchSend) []parley.BatchResult {
	h.mu.Lock()
	first := len(h.batches) == 0
	var cmids []string
	for _, it := range items {
		cmids = append(cmids, it.Req.CMID)
	}
	h.batches = append(h.batches, cmids)
	h.mu.Unlock()
	if first {
		close(h.started)
		<-h.release
	}
	out := make([]parley.BatchResult, len(items))
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, it := range items {
		h.next++
		out[i] = parley.BatchResult{Sent: parley.Sent{Conv: it.Req.Conv, Seq: h.next}}
	}
	return out
}

// waitQueued waits until n callers queue in lane conv.
func waitQueued(t *testing.T, q *sendqueue.Queue, conv string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for q.Queued(conv) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d callers queued, want %d", q.Queued(conv), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestQueueBatchesBehindLeader: while a leader's batch runs, callers
// queue; the next batches take them in arrival order, at most max at a
// time; each caller gets its own result; a caller that gives up while
// queued leaves without being sent.
func TestQueueBatchesBehindLeader(t *testing.T) {
	h := &heldRun{release: make(chan struct{}), started: make(chan struct{})}
	q := sendqueue.New(h.run, func(c string) string { return c }, 4)
	ctx := t.Context()
	send := func(ctx context.Context, cmid string) (parley.Sent, error) {
		return q.Send(ctx, parley.Principal{User: "ana"}, parley.SendRequest{Conv: "c", CMID: cmid, Body: "b"})
	}
	var wg sync.WaitGroup
	results := make([]parley.Sent, 7)
	wg.Go(func() { results[0], _ = send(ctx, "lead") })
	<-h.started
	for i := 1; i <= 6; i++ {
		wg.Go(func() { results[i], _ = send(ctx, fmt.Sprint("q", i)) })
		waitQueued(t, q, "c", i) // arrival order is the test's order
	}
	gone, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { _, err := send(gone, "gone"); errc <- err }()
	waitQueued(t, q, "c", 7)
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Errorf("queued caller that gave up: %v, want context.Canceled", err)
	}
	close(h.release)
	wg.Wait()

	want := "[[lead] [q1 q2 q3 q4] [q5 q6]]"
	if got := fmt.Sprint(h.batches); got != want {
		t.Errorf("batches %s, want %s", got, want)
	}
	for i, s := range results {
		if s.Seq != int64(i+1) {
			t.Errorf("caller %d got seq %d, want %d", i, s.Seq, i+1)
		}
	}
	if b, n := q.Stats(); b != 3 || n != 7 {
		t.Errorf("stats %d batches %d sends, want 3, 7", b, n)
	}
	if n := q.Queued("c"); n != 0 {
		t.Errorf("%d still queued", n)
	}
	// Other lanes do not wait for a busy one.
	s, err := q.Send(ctx, parley.Principal{User: "ana"}, parley.SendRequest{Conv: "other", CMID: "x", Body: "b"})
	if err != nil || s.Seq != 8 {
		t.Errorf("send in another lane: %+v, %v", s, err)
	}
}

// TestQueueBatchContextEndsWithItsCallers: a batch of several callers
// runs under a context that ends once every one of them has given up —
// the leader running it and the callers taken from the queue alike — and
// each of them still gets the batch's answer.
func TestQueueBatchContextEndsWithItsCallers(t *testing.T) {
	release, started := make(chan struct{}), make(chan struct{})
	second := make(chan context.Context, 1)
	var calls int
	run := func(ctx context.Context, items []parley.BatchSend) []parley.BatchResult {
		calls++ // batches of one lane run one at a time
		switch calls {
		case 1:
			close(started)
			<-release
		case 2:
			second <- ctx
			<-ctx.Done()
		}
		out := make([]parley.BatchResult, len(items))
		for i := range out {
			out[i].Err = fmt.Errorf("batch %d: %w", calls, ctx.Err())
		}
		return out
	}
	q := sendqueue.New(run, func(c string) string { return c }, 4)
	send := func(ctx context.Context, cmid string) error {
		_, err := q.Send(ctx, parley.Principal{User: "ana"}, parley.SendRequest{Conv: "c", CMID: cmid, Body: "b"})
		return err
	}
	var wg sync.WaitGroup
	wg.Go(func() { send(t.Context(), "lead") })
	<-started
	cancels := make([]context.CancelFunc, 3)
	errs := make([]error, 3)
	for i := range cancels {
		ctx, cancel := context.WithCancel(t.Context())
		cancels[i] = cancel
		wg.Go(func() { errs[i] = send(ctx, fmt.Sprint("q", i)) })
		waitQueued(t, q, "c", i+1)
	}
	close(release)
	// q0 leads the second batch; q1 and q2 are in it.
	ctx := <-second
	cancels[1]()
	cancels[2]()
	cancels[0]()
	<-ctx.Done() // a caller that did not leave would hang the test here
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "batch 2:") {
			t.Errorf("caller q%d: %v, want batch 2's answer", i, err)
		}
	}
}
