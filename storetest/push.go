package storetest

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/parleychat/parley"
)

// newPushSub returns a subscription as a browser makes one, at endpoint.
func newPushSub(t *testing.T, endpoint string) parley.NewPushSubscription {
	t.Helper()
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	enc := base64.RawURLEncoding
	return parley.NewPushSubscription{Endpoint: endpoint, P256DH: enc.EncodeToString(k.PublicKey().Bytes()), Auth: enc.EncodeToString(auth)}
}

// subscribe saves a subscription for p that must be accepted.
func (e *env) subscribe(t *testing.T, p parley.Principal, endpoint string) parley.PushSubscription {
	t.Helper()
	s, _, err := e.st.SavePushSubscription(ctx(t), p, newPushSub(t, endpoint))
	ok(t, err, "save push subscription "+endpoint)
	return s
}

func (e *env) pushRows(t *testing.T) int64 {
	t.Helper()
	return e.db.Int(t, "SELECT count(*) FROM push_subscriptions")
}

// testPushKey: concurrent first calls from several stores get one key,
// a valid P-256 scalar, kept in one row.
func testPushKey(t *testing.T, e *env) { pushKeyOnce(t, e) }

// testPushKeySealed: with a Sealer the row holds the key sealed, and
// another store with the same key reads the same key.
func testPushKeySealed(t *testing.T, e *env) {
	key := pushKeyOnce(t, e)
	if n := e.db.Int(t, "SELECT count(*) FROM push_keys WHERE sealed"); n != 1 {
		t.Errorf("%d sealed push_keys rows, want 1", n)
	}
	if raw := e.db.Text(t, "SELECT secret FROM push_keys"); bytes.Contains([]byte(raw), key) {
		t.Error("the push_keys row holds the key in clear")
	}
	other, err := e.db.OpenWith(t, sealedOpts)
	ok(t, err, "open another store")
	again, err := other.PushKey(ctx(t))
	ok(t, err, "push key from another store")
	if !bytes.Equal(again, key) {
		t.Error("another store reads another push key")
	}
}

func pushKeyOnce(t *testing.T, e *env) []byte {
	t.Helper()
	stores := []parley.Store{e.st, e.db.Open(t), e.db.Open(t)}
	keys := make(chan []byte, 2*len(stores))
	var wg sync.WaitGroup
	for _, st := range stores {
		for range 2 {
			wg.Go(func() {
				k, err := st.PushKey(ctx(t))
				if err != nil {
					t.Errorf("push key: %v", err)
				}
				keys <- k
			})
		}
	}
	wg.Wait()
	close(keys)
	var first []byte
	for k := range keys {
		if first == nil {
			first = k
		} else if !bytes.Equal(k, first) {
			t.Fatal("concurrent first calls got different keys")
		}
	}
	if _, err := ecdh.P256().NewPrivateKey(first); err != nil {
		t.Fatalf("the key is no P-256 scalar: %v", err)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM push_keys"); n != 1 {
		t.Errorf("%d push_keys rows, want 1", n)
	}
	return first
}

// testPushSubscriptionSave: bad subscriptions store nothing; an endpoint
// is one device's (again from it: same id, keys updated; from another
// device: moved, new id); a device keeps at most MaxPushSubscriptions.
func testPushSubscriptionSave(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	ana.DeviceID, ben.DeviceID = "d1", "d1"
	good := newPushSub(t, "https://push.example.com/a")
	for name, bad := range map[string]func(*parley.NewPushSubscription){
		"no endpoint": func(s *parley.NewPushSubscription) { s.Endpoint = "" },
		"not a url":   func(s *parley.NewPushSubscription) { s.Endpoint = "push.example.com/a" },
		"ftp":         func(s *parley.NewPushSubscription) { s.Endpoint = "ftp://push.example.com/a" },
		"user info":   func(s *parley.NewPushSubscription) { s.Endpoint = "https://u:p@push.example.com/a" },
		"fragment":    func(s *parley.NewPushSubscription) { s.Endpoint = "https://push.example.com/a#x" },
		"too long": func(s *parley.NewPushSubscription) {
			s.Endpoint = "https://push.example.com/" + string(make([]byte, 2100))
		},
		"short p256dh": func(s *parley.NewPushSubscription) { s.P256DH = s.P256DH[:40] },
		"off the curve": func(s *parley.NewPushSubscription) {
			s.P256DH = "B" + s.P256DH[1:20] + "AAAAAAAAAAAAAAAAAAAA" + s.P256DH[40:]
		},
		"p256dh not b64": func(s *parley.NewPushSubscription) { s.P256DH = "!!" + s.P256DH[2:] },
		"short auth":     func(s *parley.NewPushSubscription) { s.Auth = s.Auth[:10] },
		"no auth":        func(s *parley.NewPushSubscription) { s.Auth = "" },
	} {
		s := good
		bad(&s)
		_, _, err := e.st.SavePushSubscription(ctx(t), ana, s)
		if !wantCode(t, err, parley.CodeInvalidArgument) {
			t.Errorf("%s: accepted", name)
		}
	}
	if n := e.pushRows(t); n != 0 {
		t.Fatalf("rejected subscriptions stored %d rows", n)
	}
	padded := good
	padded.Auth += "=="
	first, created, err := e.st.SavePushSubscription(ctx(t), ana, padded)
	ok(t, err, "save")
	if !created || first.User != "ana" || first.Device != "d1" || first.Auth != good.Auth || parley.CheckPushID(first.ID) != nil {
		t.Fatalf("first save: %+v created %v", first, created)
	}
	again := newPushSub(t, good.Endpoint)
	second, created, err := e.st.SavePushSubscription(ctx(t), ana, again)
	ok(t, err, "save again")
	if created || second.ID != first.ID || second.P256DH != again.P256DH {
		t.Errorf("same device again: %+v created %v; want id %s, new keys, created false", second, created, first.ID)
	}
	ana2 := ana
	ana2.DeviceID = "d2"
	for _, p := range []parley.Principal{ana2, ben} {
		moved, created, err := e.st.SavePushSubscription(ctx(t), p, good)
		ok(t, err, "move")
		if !created || moved.ID == first.ID || moved.User != p.User || moved.Device != p.DeviceID {
			t.Errorf("moved to %s/%s: %+v created %v", p.User, p.DeviceID, moved, created)
		}
		if n := e.pushRows(t); n != 1 {
			t.Errorf("after a move: %d rows, want 1", n)
		}
	}
	var ids []string
	for i := range parley.MaxPushSubscriptions + 2 {
		ids = append(ids, e.subscribe(t, ana, fmt.Sprintf("https://push.example.com/n%d", i)).ID)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM push_subscriptions WHERE user_id = 'ana' AND device_id = 'd1'"); n != parley.MaxPushSubscriptions {
		t.Errorf("device holds %d subscriptions, want %d", n, parley.MaxPushSubscriptions)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM push_subscriptions WHERE id = ?", ids[0]); n != 0 {
		t.Error("the oldest subscription was kept past the bound")
	}
}

// testPushSubscriptionDelete: one's own goes; someone else's is NOT_FOUND
// and stays; the worker's removal needs the endpoint to still match.
func testPushSubscriptionDelete(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben")
	ana, ben := ps[0], ps[1]
	ana.DeviceID, ben.DeviceID = "d1", "d1"
	a := e.subscribe(t, ana, "https://push.example.com/a")
	b := e.subscribe(t, ben, "https://push.example.com/b")
	wantCode(t, e.st.DeletePushSubscription(ctx(t), ana, b.ID), parley.CodeNotFound)
	wantCode(t, e.st.DeletePushSubscription(ctx(t), ana, "not-an-id"), parley.CodeInvalidArgument)
	if n := e.pushRows(t); n != 2 {
		t.Fatalf("refused deletes left %d rows, want 2", n)
	}
	ana.DeviceID = "d9" // another device of the same user may delete it
	wantCode(t, e.st.DeletePushSubscription(ctx(t), ana, a.ID), "")
	wantCode(t, e.st.DeletePushSubscription(ctx(t), ana, a.ID), parley.CodeNotFound)
	if removed, err := e.st.RemovePushSubscription(ctx(t), b.ID, "https://push.example.com/other"); err != nil || removed {
		t.Errorf("remove with another endpoint: %v, %v; want false", removed, err)
	}
	if removed, err := e.st.RemovePushSubscription(ctx(t), b.ID, b.Endpoint); err != nil || !removed {
		t.Errorf("remove: %v, %v; want true", removed, err)
	}
	if n := e.pushRows(t); n != 0 {
		t.Errorf("%d rows left, want 0", n)
	}
}

// testPushSettings: a level needs an open period; only levels other than
// all are listed.
func testPushSettings(t *testing.T, e *env) {
	ps := e.users(t, "ana", "ben", "cy")
	ana, ben, cy := ps[0], ps[1], ps[2]
	e.group(t, ana, "c-team", "ben", "cy")
	e.group(t, ana, "c-other")
	_, err := e.st.RemoveMember(ctx(t), ana, "c-team", "cy")
	ok(t, err, "remove cy")
	for _, tc := range []struct {
		p     parley.Principal
		conv  string
		level parley.PushLevel
		code  parley.Code
	}{
		{ben, "c-team", "loud", parley.CodeInvalidArgument},
		{ben, "bad conv!", parley.PushNone, parley.CodeInvalidArgument},
		{ben, "c-other", parley.PushNone, parley.CodeNotMember},
		{ben, "c-nowhere", parley.PushNone, parley.CodeNotMember},
		{cy, "c-team", parley.PushNone, parley.CodeNotMember},
	} {
		_, err := e.st.SetPushLevel(ctx(t), tc.p, tc.conv, tc.level)
		wantCode(t, err, tc.code)
	}
	if n := e.db.Int(t, "SELECT count(*) FROM push_settings"); n != 0 {
		t.Fatalf("refused levels stored %d rows", n)
	}
	list := func(p parley.Principal) []parley.PushSetting {
		t.Helper()
		s, err := e.st.PushSettings(ctx(t), p)
		ok(t, err, "push settings")
		return s
	}
	if s := list(ben); s == nil || len(s) != 0 {
		t.Errorf("no settings: %#v, want an empty list", s)
	}
	for _, l := range []parley.PushLevel{parley.PushMentions, parley.PushNone} {
		got, err := e.st.SetPushLevel(ctx(t), ben, "c-team", l)
		ok(t, err, "set level")
		if got != (parley.PushSetting{Conv: "c-team", Level: l}) {
			t.Errorf("set %s: %+v", l, got)
		}
		if s := list(ben); !slices.Equal(s, []parley.PushSetting{{Conv: "c-team", Level: l}}) {
			t.Errorf("after %s: %+v", l, s)
		}
	}
	_, err = e.st.SetPushLevel(ctx(t), ben, "c-team", parley.PushAll)
	ok(t, err, "set all")
	if s := list(ben); len(s) != 0 {
		t.Errorf("after all: %+v, want none", s)
	}
}

// pushTo returns who PushTargets names for seq, as "user/device" sorted.
func (e *env) pushTo(t *testing.T, conv string, seq int64) []string {
	t.Helper()
	msg := parley.PushMessage{Conv: conv, Seq: seq}
	targets, err := e.st.PushTargets(ctx(t), []parley.PushMessage{msg})
	ok(t, err, fmt.Sprintf("push targets %s/%d", conv, seq))
	var out []string
	for _, pt := range targets {
		if pt.Msg != msg {
			t.Errorf("push targets %s/%d: a target for %+v", conv, seq, pt.Msg)
		}
		out = append(out, pt.Sub.User+"/"+pt.Sub.Device)
	}
	slices.Sort(out)
	return out
}

func wantPushTo(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: pushed to %v, want %v", what, got, want)
	}
}

// testPushTargets: who a committed message is pushed to, filtered in the
// query: members with an open period from before the message, not the
// sender, whose level allows it, on devices that are signed in and have
// not got the message yet.
func testPushTargets(t *testing.T, e *env) {
	ana, ben, cy, dan := e.member(t, "ana"), e.member(t, "ben"), e.member(t, "cy"), e.member(t, "dan")
	e.member(t, "eve")
	c := e.group(t, ana, "c-team", "ben", "cy", "dan", "eve").ID
	for _, u := range []parley.Principal{ana, ben, cy, dan, as("eve")} {
		e.subscribe(t, u, "https://push.example.com/"+u.User)
	}
	ben2 := e.login(t, "ben", "d2", "i1").Principal
	e.subscribe(t, ben2, "https://push.example.com/ben2")
	_, err := e.st.RemoveMember(ctx(t), ana, c, "eve")
	ok(t, err, "remove eve")

	s1 := e.send(t, ana, c, "m1", "hello").Seq
	wantPushTo(t, "a message", e.pushTo(t, c, s1), "ben/d1", "ben/d2", "cy/d1", "dan/d1")
	wantPushTo(t, "a membership event", e.pushTo(t, c, s1-1))

	_, err = e.st.Ack(ctx(t), ben, c, s1)
	ok(t, err, "ack")
	wantPushTo(t, "after ben's d1 acked", e.pushTo(t, c, s1), "ben/d2", "cy/d1", "dan/d1")

	_, err = e.st.SetPushLevel(ctx(t), cy, c, parley.PushMentions)
	ok(t, err, "cy: mentions")
	_, err = e.st.SetPushLevel(ctx(t), dan, c, parley.PushNone)
	ok(t, err, "dan: none")
	s2 := e.send(t, ben, c, "m2", "no mention").Seq
	s3 := e.send(t, ben, c, "m3", "hey @cy and @dan").Seq
	wantPushTo(t, "mentions level, no mention", e.pushTo(t, c, s2), "ana/d1")
	wantPushTo(t, "mentions level, mentioned", e.pushTo(t, c, s3), "ana/d1", "cy/d1")

	e.recall(t, ben, c, s2, "r2")
	wantPushTo(t, "a recalled message", e.pushTo(t, c, s2))

	_, err = e.st.AddMember(ctx(t), ana, c, "eve")
	ok(t, err, "eve back")
	wantPushTo(t, "before the rejoin", e.pushTo(t, c, s3), "ana/d1", "cy/d1")

	ok(t, e.st.RevokeDevice(ctx(t), ana, "d1"), "sign ana out")
	s4 := e.send(t, ben2, c, "m4", "to all").Seq
	wantPushTo(t, "signed out, rejoined", e.pushTo(t, c, s4), "eve/d1")

	wantPushTo(t, "unknown conversation", e.pushTo(t, "c-nowhere", 1))
	wantPushTo(t, "past the head", e.pushTo(t, c, s4+5))
	// A batch answers each message as it would alone, in the batch's
	// order (a message twice, twice), in one call.
	pm := func(conv string, seq int64) parley.PushMessage { return parley.PushMessage{Conv: conv, Seq: seq} }
	batch := []parley.PushMessage{pm(c, s4), pm(c, s1), pm("c-nowhere", 1), pm(c, s2), pm(c, s3), pm(c, s4)}
	var want []string
	for _, m := range batch {
		for _, who := range e.pushTo(t, m.Conv, m.Seq) {
			want = append(want, fmt.Sprintf("%d:%s", m.Seq, who))
		}
	}
	targets, err := e.st.PushTargets(ctx(t), batch)
	ok(t, err, "push targets of a batch")
	var got []string
	at := 0 // the batch's message the targets have reached
	for i, pt := range targets {
		got = append(got, fmt.Sprintf("%d:%s/%s", pt.Msg.Seq, pt.Sub.User, pt.Sub.Device))
		for at < len(batch) && batch[at] != pt.Msg {
			at++
		}
		if at == len(batch) {
			t.Errorf("batch: target %d (%+v) out of the batch's order", i, pt.Msg)
			break
		}
	}
	// pushTo sorts each message's targets; ids are random, so compare
	// each message's sorted set in the batch's order.
	sortRuns := func(xs []string) []string {
		out := slices.Clone(xs)
		for i := 0; i < len(out); {
			j := i
			for j < len(out) && strings.SplitN(out[j], ":", 2)[0] == strings.SplitN(out[i], ":", 2)[0] {
				j++
			}
			slices.Sort(out[i:j])
			i = j
		}
		return out
	}
	if g, w := sortRuns(got), sortRuns(want); !slices.Equal(g, w) {
		t.Errorf("batch: pushed to %v, want %v", g, w)
	}
	none, err := e.st.PushTargets(ctx(t), nil)
	ok(t, err, "push targets of no message")
	if len(none) != 0 {
		t.Errorf("no message: %v", none)
	}

	for _, bad := range [][]parley.PushMessage{{pm("bad conv!", 1)}, {pm(c, 0)}, {pm(c, s1), pm(c, -1)}, make([]parley.PushMessage, parley.MaxPushBatch+1)} {
		_, err = e.st.PushTargets(ctx(t), bad)
		wantCode(t, err, parley.CodeInvalidArgument)
	}
}
