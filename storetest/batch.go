package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/parleychat/parley"
)

// batcher returns the store's group commit entry point (every store has
// one: parley.SendBatcher).
func (e *env) batcher(t *testing.T) parley.SendBatcher {
	t.Helper()
	b, ok := e.st.(parley.SendBatcher)
	if !ok {
		t.Fatalf("%T does not implement parley.SendBatcher", e.st)
	}
	return b
}

// batchItem is one send of a batch case and what it must get.
type batchItem struct {
	p         parley.Principal
	conv      string
	cmid      string
	body      string
	code      parley.Code // "" for success
	seq       int64       // success: the seq answered
	dup       bool
	sameMIDAs int // success: index+1 of an item whose mid this one repeats (0: none)
}

// runBatch sends items as one batch and checks every result.
func (e *env) runBatch(t *testing.T, items []batchItem) []parley.BatchResult {
	t.Helper()
	in := make([]parley.BatchSend, len(items))
	for i, it := range items {
		in[i] = parley.BatchSend{P: it.p, Req: parley.SendRequest{Conv: it.conv, CMID: it.cmid, Body: it.body}}
	}
	res := e.batcher(t).SendBatch(ctx(t), in)
	if len(res) != len(items) {
		t.Fatalf("%d results for %d items", len(res), len(items))
	}
	for i, it := range items {
		r := res[i]
		if !wantCode(t, r.Err, it.code) {
			t.Errorf("item %d (%s %s/%s): above", i, it.p.User, it.conv, it.cmid)
			continue
		}
		if it.code != "" {
			if r.Sent != (parley.Sent{}) {
				t.Errorf("item %d: rejected with a result %+v", i, r.Sent)
			}
			continue
		}
		if r.Sent.Conv != it.conv || r.Sent.Seq != it.seq || r.Sent.Dup != it.dup || r.Sent.MID == "" || r.Sent.Epoch != 1 {
			t.Errorf("item %d (%s %s/%s): got %+v, want seq %d dup %v epoch 1", i, it.p.User, it.conv, it.cmid, r.Sent, it.seq, it.dup)
		}
		if j := it.sameMIDAs - 1; j >= 0 && r.Sent.MID != res[j].Sent.MID {
			t.Errorf("item %d: mid %q, want item %d's %q", i, r.Sent.MID, j, res[j].Sent.MID)
		}
	}
	return res
}

// testBatchOutcomesIndependent (group commit): one batch holds a replay, a
// mismatch, a non-member, a purged key, a malformed item, an unknown
// conversation and fresh sends (one of them twice, one key reused by
// another sender). Every item gets exactly the answer it would get alone,
// the fresh ones consecutive seqs in item order, and the rejected ones
// change nothing: the stored log is the fresh items and nothing else.
func testBatchOutcomesIndependent(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	ben := as("ben")
	e.bystander(t, "ben")
	cara := as("cara")
	e.bystander(t, "cara")
	e.group(t, ana, "c-ab", "ben")     // seqs 1, 2
	e.send(t, ana, "c-ab", "k0", "m0") // 3, purged below
	orig := e.send(t, ana, "c-ab", "k1", "hello")
	ok(t, e.st.SetRetention(ctx(t), "c-ab", parley.Retention{KeepLast: 1}), "keep last 1")
	if _, err := e.st.Purge(ctx(t), "c-ab"); err != nil {
		t.Fatalf("purge: %v", err)
	}
	ok(t, e.st.SetRetention(ctx(t), "c-ab", parley.Retention{}), "no policy")

	res := e.runBatch(t, []batchItem{
		{p: ana, conv: "c-ab", cmid: "k1", body: "hello", seq: 4, dup: true}, // a replay
		{p: ana, conv: "c-ab", cmid: "k1", body: "other", code: parley.CodeIdempotencyMismatch},
		{p: cara, conv: "c-ab", cmid: "kc", body: "let me in", code: parley.CodeNotMember},
		{p: ana, conv: "c-ab", cmid: "k0", body: "m0", code: parley.CodeOriginalExpired},
		{p: ana, conv: "c-ab", cmid: "k5", body: "fresh", seq: 5},
		{p: ben, conv: "c-ab", cmid: "kb", body: "fresh from ben", seq: 6},
		{p: ana, conv: "c-ab", cmid: "k5", body: "fresh", seq: 5, dup: true, sameMIDAs: 5}, // replays item 4
		{p: ana, conv: "c-ab", cmid: "k5", body: "changed", code: parley.CodeIdempotencyMismatch},
		{p: ana, conv: "c-ab", cmid: "k6", body: "", code: parley.CodeInvalidArgument},
		{p: ana, conv: "c-none", cmid: "k7", body: "nowhere", code: parley.CodeNotMember},
		{p: ben, conv: "c-ab", cmid: "k5", body: "ben's own k5", seq: 7},
	})
	if res[0].Sent.MID != orig.MID {
		t.Errorf("replay mid %q, want the original %q", res[0].Sent.MID, orig.MID)
	}
	if h := e.conv(t, "c-ab").Head; h != 7 {
		t.Errorf("head %d, want 7", h)
	}
	if !e.bodyIs(t, "c-ab", 4, "hello") {
		t.Error("the mismatch touched the original row")
	}
	got := describeAll(e.syncAll(t, ana, "c-ab", 4))
	want := []string{`5 message ana/d1 "fresh"`, `6 message ben/d1 "fresh from ben"`, `7 message ben/d1 "ben's own k5"`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("log after the batch:\n got %q\nwant %q", got, want)
	}
	for _, k := range []struct{ user, cmid string }{{"ana", "k5"}, {"ben", "k5"}, {"ana", "k1"}} {
		if n := e.keyRows(t, "c-ab", k.user, k.cmid); n != 1 {
			t.Errorf("%d rows for key %s/%s, want 1", n, k.user, k.cmid)
		}
	}
	for _, k := range []struct{ user, cmid string }{{"cara", "kc"}, {"ana", "k0"}, {"ana", "k6"}} {
		if n := e.keyRows(t, "c-ab", k.user, k.cmid); n != 0 {
			t.Errorf("%d rows for the rejected key %s/%s, want 0", n, k.user, k.cmid)
		}
	}
	if n := e.rows(t, "c-none"); n != 0 {
		t.Errorf("%d rows in an unknown conversation", n)
	}
}

// testBatchSeqsInArrivalOrder: a batch of fresh sends by two members,
// interleaved, gets consecutive seqs in item order, and a batch of only
// rejected items (unknown conversation) changes nothing.
func testBatchSeqsInArrivalOrder(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	e.group(t, ana, "c-ab", "ben")
	var items []batchItem
	var want []string
	for i := range 20 {
		p := ana
		if i%2 == 1 {
			p = as("ben")
		}
		body := fmt.Sprintf("m%02d", i)
		items = append(items, batchItem{p: p, conv: "c-ab", cmid: fmt.Sprintf("k%02d", i), body: body, seq: int64(3 + i)})
		want = append(want, fmt.Sprintf("%d message %s/d1 %q", 3+i, p.User, body))
	}
	e.runBatch(t, items)
	if got := describeAll(e.syncAll(t, ana, "c-ab", 2)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("log:\n got %q\nwant %q", got, want)
	}

	before := e.snapshot(t, "c-ab")
	e.runBatch(t, []batchItem{
		{p: ana, conv: "c-zz", cmid: "z1", body: "a", code: parley.CodeNotMember},
		{p: ana, conv: "c-zz", cmid: "z2", body: "b", code: parley.CodeNotMember},
	})
	e.unchanged(t, "c-ab", before)
	if n := e.rows(t, "c-zz"); n != 0 {
		t.Errorf("%d rows in an unknown conversation", n)
	}
}

// testConcurrentSendsOneConversation: many goroutines sending through one
// store to one conversation at once (the case group commit batches) each
// get their own new seq; the seqs are exactly head+1 … head+n, every
// answered seq holds that sender's body, and a concurrent replay of each
// request answers the same seq and mid.
func testConcurrentSendsOneConversation(t *testing.T, e *env) {
	const senders, each = 16, 8
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	e.group(t, ana, "c-ab", "ben")
	type key struct{ g, i int }
	var mu sync.Mutex
	got := map[key]parley.Sent{}
	var wg sync.WaitGroup
	for g := range senders {
		p := ana
		if g%2 == 1 {
			p = as("ben")
		}
		wg.Go(func() {
			for i := range each {
				r := parley.SendRequest{Conv: "c-ab", CMID: fmt.Sprintf("g%d-%d", g, i), Body: fmt.Sprintf("from %d #%d", g, i)}
				s, err := e.st.Send(ctx(t), p, r)
				if err != nil {
					t.Errorf("send %s: %v", r.CMID, err)
					return
				}
				again, err := e.st.Send(ctx(t), p, r)
				if err != nil || !again.Dup || again.Seq != s.Seq || again.MID != s.MID {
					t.Errorf("replay of %s: %+v, %v; want dup of %+v", r.CMID, again, err, s)
				}
				mu.Lock()
				got[key{g, i}] = s
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for k, s := range got {
		if s.Dup || s.Seq < 3 || s.Seq > 2+senders*each || seen[s.Seq] {
			t.Errorf("send %v: %+v (dup, out of range, or a seq given twice)", k, s)
		}
		seen[s.Seq] = true
		if !e.bodyIs(t, "c-ab", s.Seq, fmt.Sprintf("from %d #%d", k.g, k.i)) {
			t.Errorf("seq %d does not hold the body of send %v", s.Seq, k)
		}
	}
	if h := e.conv(t, "c-ab").Head; h != 2+senders*each {
		t.Errorf("head %d, want %d", h, 2+senders*each)
	}
}

// testBatchAcrossConversations: one batch holds items of three
// conversations, named first out of id order and interleaved, with a
// replay, a mismatch, a non-member and an unknown conversation among them.
// Every item gets the answer it would get alone, the fresh ones of each
// conversation consecutive seqs in item order and an At that is their
// event's, and the rejected ones change nothing.
func testBatchAcrossConversations(t *testing.T, e *env) {
	ana := e.member(t, "ana")
	ben := as("ben")
	e.bystander(t, "ben")
	cara := as("cara")
	e.bystander(t, "cara")
	e.group(t, ana, "c-1", "ben") // seqs 1, 2
	e.group(t, ana, "c-2", "ben")
	e.group(t, ana, "c-3", "cara")
	orig := e.send(t, ana, "c-1", "k1", "hello") // 3

	before := time.Now()
	items := []batchItem{
		{p: ana, conv: "c-3", cmid: "a1", body: "three", seq: 3},
		{p: ana, conv: "c-1", cmid: "k1", body: "hello", seq: 3, dup: true}, // a replay
		{p: ben, conv: "c-1", cmid: "b1", body: "one", seq: 4},
		{p: ana, conv: "c-2", cmid: "k1", body: "two", seq: 3}, // the same cmid in another conversation
		{p: ana, conv: "c-1", cmid: "k1", body: "changed", code: parley.CodeIdempotencyMismatch},
		{p: cara, conv: "c-2", cmid: "c1", body: "let me in", code: parley.CodeNotMember},
		{p: cara, conv: "c-3", cmid: "c1", body: "three from cara", seq: 4},
		{p: ana, conv: "c-none", cmid: "n1", body: "nowhere", code: parley.CodeNotMember},
		{p: ben, conv: "c-2", cmid: "b2", body: "two from ben", seq: 4},
		{p: ana, conv: "c-1", cmid: "a3", body: "one more", seq: 5},
	}
	res := e.runBatch(t, items)
	after := time.Now()
	if res[1].Sent.MID != orig.MID || !res[1].Sent.At.IsZero() {
		t.Errorf("replay: mid %q at %v, want the original %q and no At", res[1].Sent.MID, res[1].Sent.At, orig.MID)
	}
	for i, it := range items {
		if it.code != "" || it.dup {
			continue
		}
		s := res[i].Sent
		if ev := e.fetch(t, ana, it.conv, s.Seq); !s.At.Equal(ev.At) || s.At.Location() != time.UTC || !within(s.At, before, after) {
			t.Errorf("item %d: At %v, read back %v, sent between %v and %v", i, s.At, ev.At, before, after)
		}
	}
	for _, c := range []struct {
		conv string
		head int64
		log  []string
	}{
		{"c-1", 5, []string{`3 message ana/d1 "hello"`, `4 message ben/d1 "one"`, `5 message ana/d1 "one more"`}},
		{"c-2", 4, []string{`3 message ana/d1 "two"`, `4 message ben/d1 "two from ben"`}},
		{"c-3", 4, []string{`3 message ana/d1 "three"`, `4 message cara/d1 "three from cara"`}},
	} {
		if h := e.conv(t, c.conv).Head; h != c.head {
			t.Errorf("%s: head %d, want %d", c.conv, h, c.head)
		}
		if got := describeAll(e.syncAll(t, ana, c.conv, 2)); fmt.Sprint(got) != fmt.Sprint(c.log) {
			t.Errorf("%s after the batch:\n got %q\nwant %q", c.conv, got, c.log)
		}
	}
	if n := e.keyRows(t, "c-2", "cara", "c1"); n != 0 {
		t.Errorf("%d rows for the non-member's key, want 0", n)
	}
	if n := e.rows(t, "c-none"); n != 0 {
		t.Errorf("%d rows in an unknown conversation", n)
	}
}

// testConcurrentSendsManyConversations: goroutines send to four
// conversations at once, half through Send, half through SendBatch with
// one item per conversation in orders that differ between them (batches
// that name the same conversations in opposite orders must not deadlock).
// Every send succeeds with its own new seq; each conversation's seqs are
// exactly head+1 … head+n and hold the bodies answered.
func testConcurrentSendsManyConversations(t *testing.T, e *env) {
	const senders, each = 8, 6
	convs := []string{"c-0", "c-1", "c-2", "c-3"}
	ana := e.member(t, "ana")
	e.bystander(t, "ben")
	for _, c := range convs {
		e.group(t, ana, c, "ben")
	}
	type key struct{ conv, body string }
	var mu sync.Mutex
	got := map[key]parley.Sent{}
	record := func(conv, body string, s parley.Sent, err error) {
		if err != nil || s.Dup {
			t.Errorf("send %s %q: %+v, %v", conv, body, s, err)
			return
		}
		mu.Lock()
		got[key{conv, body}] = s
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for g := range senders {
		p := ana
		if g%2 == 1 {
			p = as("ben")
		}
		wg.Go(func() {
			for i := range each {
				order := slices.Clone(convs)
				if (g+i)%2 == 1 {
					slices.Reverse(order)
				}
				var batch []parley.BatchSend
				for _, c := range order {
					r := parley.SendRequest{Conv: c, CMID: fmt.Sprintf("g%d-%d", g, i), Body: fmt.Sprintf("from %d #%d", g, i)}
					if g < senders/2 {
						s, err := e.st.Send(ctx(t), p, r)
						record(c, r.Body, s, err)
					} else {
						batch = append(batch, parley.BatchSend{P: p, Req: r})
					}
				}
				if batch != nil {
					for j, res := range e.batcher(t).SendBatch(ctx(t), batch) {
						record(batch[j].Req.Conv, batch[j].Req.Body, res.Sent, res.Err)
					}
				}
			}
		})
	}
	wg.Wait()
	const n = senders * each
	seen := map[key]bool{}
	for k, s := range got {
		if s.Conv != k.conv || s.Seq < 3 || s.Seq > 2+n || seen[key{k.conv, fmt.Sprint(s.Seq)}] {
			t.Errorf("send %v: %+v (out of range, or a seq given twice)", k, s)
		}
		seen[key{k.conv, fmt.Sprint(s.Seq)}] = true
		if !e.bodyIs(t, k.conv, s.Seq, k.body) {
			t.Errorf("%s seq %d does not hold %q", k.conv, s.Seq, k.body)
		}
	}
	for _, c := range convs {
		if h := e.conv(t, c).Head; h != 2+n {
			t.Errorf("%s: head %d, want %d", c, h, 2+n)
		}
	}
}
