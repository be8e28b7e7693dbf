package client_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/wire"
)

// fakeConvsPage is the fake's convs page size: small, so a client has to
// walk pages.
const fakeConvsPage = 2

// fake is a scripted server for what the real gateway cannot be made to do
// on demand: duplicate and out-of-order pushes, a reply that never comes, a
// cursor above the head without an epoch change (a rollback and a rate
// limit run against the real gateway: TestGatewayRollbackRebuilds,
// TestRateLimitedWaitsAndKeepsTheKey). It keeps conversations whose every event is
// visible, answers the protocol's requests from them, and lets a test take
// over any request with hook. Several listeners may share one fake (they
// then behave as gateways on one store).
type fake struct {
	t     *testing.T
	token string

	mu     sync.Mutex
	convs  map[string]*fakeConv
	keys   map[string]wire.Frame // cmid → the reply of its first execution
	reqs   []fakeReq
	subs   map[*websocket.Conn]bool
	refuse parley.Code // answer every upgrade with this code
	// hook sees every request first; true means it answered (or chose
	// not to) and the default answer is skipped.
	hook func(ws *websocket.Conn, req wire.Request) bool
}

type fakeReq struct {
	url string
	req wire.Request
}

type fakeConv struct {
	epoch  int64
	events []wire.Event // events[i].Seq == i+1
}

func newFake(t *testing.T) *fake {
	return &fake{t: t, token: "tok", convs: map[string]*fakeConv{}, keys: map[string]wire.Frame{}, subs: map[*websocket.Conn]bool{}}
}

// listen starts a listener on 127.0.0.1 and returns its ws:// URL.
func (f *fake) listen() string {
	var url string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { f.serve(w, r, url) }))
	url = "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"
	f.t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return url
}

func (f *fake) serve(w http.ResponseWriter, r *http.Request, url string) {
	f.mu.Lock()
	refuse := f.refuse
	f.mu.Unlock()
	if refuse != "" {
		wire.WriteProblem(w, refuse, "refused by the fake", "")
		return
	}
	if wire.BearerToken(r) != f.token {
		wire.WriteProblem(w, parley.CodeUnauthenticated, "bad token", "")
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer ws.CloseNow()
	defer func() {
		f.mu.Lock()
		delete(f.subs, ws)
		f.mu.Unlock()
	}()
	ctx := r.Context()
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		req, err := wire.DecodeRequest(b)
		if err != nil {
			f.t.Errorf("fake: client sent a bad frame %s: %v", b, err)
			return
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, fakeReq{url, req})
		hook := f.hook
		f.mu.Unlock()
		if hook != nil && hook(ws, req) {
			continue
		}
		reply, push := f.answer(ws, req)
		reply.RID = req.RID
		ws.Write(ctx, websocket.MessageText, wire.MarshalFrame(reply))
		if push != nil {
			f.push(wire.Frame{T: wire.TEvent, Ev: push})
		}
	}
}

func ptr[T any](v T) *T { return &v }

// answer is the default behaviour of a gateway on a store where everything
// is visible.
func (f *fake) answer(ws *websocket.Conn, req wire.Request) (reply wire.Frame, push *wire.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.convs[req.Conv]
	switch req.T {
	case wire.TSub:
		f.subs[ws] = true
		return wire.Subscribed(), nil
	case wire.TConvs:
		// Pages of at most fakeConvsPage, by id; next is the last id.
		ids := slices.Sorted(maps.Keys(f.convs))
		if req.Before != "" {
			i, _ := slices.BinarySearch(ids, req.Before)
			for i < len(ids) && ids[i] <= req.Before {
				i++
			}
			ids = ids[i:]
		}
		out := []wire.Conv{}
		for _, id := range ids[:min(len(ids), fakeConvsPage)] {
			c := f.convs[id]
			out = append(out, wire.Conv{Conv: id, Head: int64(len(c.events)), Epoch: c.epoch, MinSeq: 1, Member: true})
		}
		more := len(ids) > fakeConvsPage
		fr := wire.Frame{T: wire.TConvsReply, Convs: out, HasMore: &more}
		if more {
			fr.Next = out[len(out)-1].Conv
		}
		return fr, nil
	}
	if c == nil {
		return wire.Error(parley.CodeNotMember, "no such conversation"), nil
	}
	head := int64(len(c.events))
	switch req.T {
	case wire.TSync:
		s := req.SyncRequest()
		if s.Epoch != 0 && s.Epoch != c.epoch {
			return wire.Error(parley.CodeEpochChanged, "rolled back"), nil
		}
		if s.After > head {
			return wire.Error(parley.CodeCursorAhead, "ahead"), nil
		}
		evs := []wire.Event{}
		for _, e := range c.events[s.After:] {
			if len(evs) == s.Limit {
				break
			}
			evs = append(evs, e)
		}
		next := head
		if len(evs) > 0 {
			next = evs[len(evs)-1].Seq
		}
		return wire.Frame{T: wire.TPage, Conv: req.Conv, Events: evs, NextAfter: ptr(next), HasMore: ptr(next < head),
			Head: ptr(head), MinSeq: ptr(int64(1)), Trimmed: ptr(false), Epoch: ptr(c.epoch)}, nil
	case wire.TSend, wire.TRecall:
		if r, ok := f.keys[req.CMID]; ok {
			r.Dup = ptr(true)
			return r, nil
		}
		ev := f.appendLocked(req.Conv, req.Body)
		if req.T == wire.TRecall {
			ev.Kind, ev.Body, ev.Target = "recall", "", *req.Target
			c.events[len(c.events)-1] = ev
		}
		r := wire.Frame{T: wire.TSent, Conv: req.Conv, Seq: ptr(ev.Seq), MID: ev.MID, Dup: ptr(false), Epoch: ptr(c.epoch)}
		if req.T == wire.TRecall {
			r = wire.Frame{T: wire.TRecalled, Conv: req.Conv, Seq: ptr(ev.Seq), Dup: ptr(false)}
		}
		f.keys[req.CMID] = r
		return r, &ev
	case wire.TFetch:
		if *req.Seq < 1 || *req.Seq > head {
			return wire.Error(parley.CodeNotFound, "no such event"), nil
		}
		return wire.Frame{T: wire.TFetched, Conv: req.Conv, Ev: &c.events[*req.Seq-1]}, nil
	case wire.TAck:
		return wire.Acked(req.Conv, *req.Seq), nil
	case wire.TRead:
		return wire.ReadOK(req.Conv, *req.Seq), nil
	}
	return wire.Error(parley.CodeInvalidArgument, "unknown"), nil
}

// appendLocked adds a message event to conv (creating it in epoch 1).
func (f *fake) appendLocked(conv, body string) wire.Event {
	c := f.convs[conv]
	if c == nil {
		c = &fakeConv{epoch: 1}
		f.convs[conv] = c
	}
	seq := int64(len(c.events) + 1)
	ev := wire.Event{Conv: conv, Seq: seq, MID: fmt.Sprintf("m-%s-%d-%d", conv, c.epoch, seq), Kind: "message",
		Sender: "ana", Device: "d1", Body: body, At: "2026-01-01T00:00:00.000Z"}
	c.events = append(c.events, ev)
	return ev
}

// add appends n events to conv without pushing them and returns them.
func (f *fake) add(conv string, n int) []wire.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var evs []wire.Event
	for i := 0; i < n; i++ {
		evs = append(evs, f.appendLocked(conv, fmt.Sprintf("m%d", i)))
	}
	return evs
}

// push writes fr to every subscribed socket.
func (f *fake) push(fr wire.Frame) {
	f.mu.Lock()
	var ws []*websocket.Conn
	for c := range f.subs {
		ws = append(ws, c)
	}
	f.mu.Unlock()
	for _, c := range ws {
		c.Write(context.Background(), websocket.MessageText, wire.MarshalFrame(fr))
	}
}

// requests returns the requests of type t received so far.
func (f *fake) requests(t string) []fakeReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeReq
	for _, r := range f.reqs {
		if r.req.T == t {
			out = append(out, r)
		}
	}
	return out
}

func (f *fake) setHook(h func(ws *websocket.Conn, req wire.Request) bool) {
	f.mu.Lock()
	f.hook = h
	f.mu.Unlock()
}
