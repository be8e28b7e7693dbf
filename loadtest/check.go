package loadtest

import (
	"fmt"
	"slices"
	"sort"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/client"
	"github.com/parleychat/parley/wire"
)

// Truth is the committed state the checker holds the devices to: every
// conversation's whole log as the server stores it, read after the run.
type Truth struct {
	Convs map[string]*ConvLog
}

// ConvLog is one conversation's committed log.
type ConvLog struct {
	ID string
	// Initial are the members the conversation was created with: their
	// periods start at seq 1 (the creation's member_joined events,
	// seqs 1..CreateHead).
	Initial    []string
	CreateHead int64
	Events     []wire.Event // every committed event, ascending seq
}

// Period is one membership period [From, To]; To 0 means open.
type Period struct{ From, To int64 }

// Periods derives user's membership periods from the log: initial members
// from seq 1, a later member_joined of the user opens a period at its seq,
// the user's member_left closes it at its seq.
func (c *ConvLog) Periods(user string) []Period {
	var ps []Period
	open := false
	if slices.Contains(c.Initial, user) {
		ps, open = append(ps, Period{From: 1}), true
	}
	for _, ev := range c.Events {
		if ev.User != user {
			continue
		}
		switch ev.Kind {
		case string(parley.EventMemberJoined):
			if ev.Seq <= c.CreateHead || open {
				continue
			}
			ps, open = append(ps, Period{From: ev.Seq}), true
		case string(parley.EventMemberLeft):
			if open {
				ps[len(ps)-1].To = ev.Seq
				open = false
			}
		}
	}
	return ps
}

func visible(ps []Period, seq int64) bool {
	for _, p := range ps {
		if seq >= p.From && (p.To == 0 || seq <= p.To) {
			return true
		}
	}
	return false
}

// Visible returns the events of the log user may see, in seq order.
func (c *ConvLog) Visible(user string) []wire.Event {
	ps := c.Periods(user)
	var out []wire.Event
	for _, ev := range c.Events {
		if visible(ps, ev.Seq) {
			out = append(out, ev)
		}
	}
	return out
}

// left reports whether user ever left the conversation.
func (c *ConvLog) left(user string) bool {
	for _, ev := range c.Events {
		if ev.Kind == string(parley.EventMemberLeft) && ev.User == user {
			return true
		}
	}
	return false
}

// Applied is one event as a device applied it: enough to tell it from
// another (the body may change by a recall, so it is not compared).
type Applied struct {
	Seq    int64
	Kind   string
	MID    string
	Sender string
}

func appliedOf(ev wire.Event) Applied {
	return Applied{Seq: ev.Seq, Kind: ev.Kind, MID: ev.MID, Sender: ev.Sender}
}

// DeviceLog is what one device did and saw during a run.
type DeviceLog struct {
	User, Device string
	Applied      map[string][]Applied // conv → events in the order handed to the Handler
	Resets       []string             // Handler.Reset calls (conv: code)
	Trims        []string             // Handler.Trimmed calls
	Ended        []client.Item        // the outbox's ended items (from its file)
	Pending      []client.Item        // items still pending at the end
	Outcomes     map[string]int       // cmid → OnOutcome calls
	Enqueued     []string             // cmids the load generator enqueued
}

// UnreadObs is one convs entry as a user's device read it at the end.
type UnreadObs struct {
	User, Conv string
	Read       int64
	Unread     int64
	Capped     bool
}

// Violation is one broken promise, with enough to find it.
type Violation struct {
	Kind   string `json:"kind"`
	Device string `json:"device,omitempty"`
	Conv   string `json:"conv,omitempty"`
	Detail string `json:"detail"`
}

func (v Violation) String() string {
	s := v.Kind
	if v.Device != "" {
		s += " device=" + v.Device
	}
	if v.Conv != "" {
		s += " conv=" + v.Conv
	}
	return s + ": " + v.Detail
}

// Violation kinds.
const (
	VLog     = "log"     // a device's applied log differs from what its user may see
	VReset   = "reset"   // a device was told to rebuild (no rollback happened)
	VOutbox  = "outbox"  // an item did not end exactly once, or ended unexplained
	VOrphan  = "orphan"  // a committed event no outbox item accounts for
	VUnread  = "unread"  // an unread count differs from the log
	VUnknown = "unknown" // an observation about something the run did not create
)

// Check holds every device to the truth. The result is empty when the run
// kept every promise:
//   - each device's applied log, per conversation, equals exactly the
//     committed events visible to its user, in seq order, with no gap, no
//     duplicate and nothing outside the user's membership periods;
//   - every outbox item the load generator enqueued ended exactly once:
//     sent (the log holds it at its seq, from its user) or a terminal code
//     the log explains (NOT_MEMBER after the user was removed; a recall of
//     a message already recalled); and every committed message or recall
//     of a user is accounted for by exactly one item;
//   - each unread count equals what the log implies for the read cursor
//     reported with it.
func Check(t Truth, devs []DeviceLog, unread []UnreadObs) []Violation {
	convIDs := make([]string, 0, len(t.Convs))
	for id := range t.Convs {
		convIDs = append(convIDs, id)
	}
	sort.Strings(convIDs)
	var vs []Violation
	for _, d := range devs {
		vs = append(vs, checkLog(t, convIDs, d)...)
	}
	claimed := map[seqKey]string{} // (conv, seq) → device/cmid of the item that landed there
	for _, d := range devs {
		vs = append(vs, checkOutbox(t, d, claimed)...)
	}
	vs = append(vs, checkOrphans(t, convIDs, devs, claimed)...)
	return append(vs, checkUnread(t, unread)...)
}

// seqKey names one event: a conversation and a seq in it.
type seqKey struct {
	conv string
	seq  int64
}

// checkLog holds d's applied logs to what its user may see of every
// conversation (convIDs, sorted) and reports each reset and trim.
func checkLog(t Truth, convIDs []string, d DeviceLog) []Violation {
	var vs []Violation
	name := d.User + "/" + d.Device
	for conv := range d.Applied {
		if t.Convs[conv] == nil && len(d.Applied[conv]) > 0 {
			vs = append(vs, Violation{Kind: VLog, Device: name, Conv: conv, Detail: "events applied for a conversation the run did not create"})
		}
	}
	for _, id := range convIDs {
		want := t.Convs[id].Visible(d.User)
		if msg := compareLog(want, d.Applied[id]); msg != "" {
			vs = append(vs, Violation{Kind: VLog, Device: name, Conv: id, Detail: msg})
		}
	}
	for _, r := range d.Resets {
		vs = append(vs, Violation{Kind: VReset, Device: name, Detail: "told to rebuild " + r + " though nothing was rolled back"})
	}
	for _, r := range d.Trims {
		vs = append(vs, Violation{Kind: VReset, Device: name, Detail: "told history was trimmed in " + r + " though nothing was purged"})
	}
	return vs
}

// checkOutbox holds d's outbox to its promise: every item enqueued ended
// exactly once, with a seq the log holds for it or a code the log
// explains. The seqs its sent items landed at are added to claimed.
func checkOutbox(t Truth, d DeviceLog, claimed map[seqKey]string) []Violation {
	var vs []Violation
	name := d.User + "/" + d.Device
	ended := map[string]client.Item{}
	for _, it := range d.Ended {
		if _, dup := ended[it.CMID]; dup {
			vs = append(vs, Violation{Kind: VOutbox, Device: name, Conv: it.Conv, Detail: "item " + it.CMID + " ended twice in the outbox file"})
		}
		ended[it.CMID] = it
	}
	for _, it := range d.Pending {
		vs = append(vs, Violation{Kind: VOutbox, Device: name, Conv: it.Conv, Detail: fmt.Sprintf("%s item %s never ended", it.Kind, it.CMID)})
	}
	for _, cmid := range d.Enqueued {
		_, done := ended[cmid]
		pending := slices.ContainsFunc(d.Pending, func(it client.Item) bool { return it.CMID == cmid })
		if !done && !pending {
			vs = append(vs, Violation{Kind: VOutbox, Device: name, Detail: "item " + cmid + " was enqueued but is not in the outbox"})
		}
		if n := d.Outcomes[cmid]; done && n != 1 {
			vs = append(vs, Violation{Kind: VOutbox, Device: name, Detail: fmt.Sprintf("item %s reported ended %d times, want once", cmid, n)})
		}
	}
	for _, it := range d.Ended {
		vs = append(vs, checkEnded(t, d.User, name, it, claimed)...)
	}
	return vs
}

// checkEnded holds one ended item of the device name (of user) to the
// log.
func checkEnded(t Truth, user, name string, it client.Item, claimed map[seqKey]string) []Violation {
	c := t.Convs[it.Conv]
	if c == nil {
		return []Violation{{Kind: VUnknown, Device: name, Conv: it.Conv, Detail: "item for a conversation the run did not create"}}
	}
	var vs []Violation
	if it.Code != "" {
		if !explained(c, user, it) {
			vs = append(vs, Violation{Kind: VOutbox, Device: name, Conv: it.Conv, Detail: fmt.Sprintf("%s item %s ended %s (%s), which the log does not explain", it.Kind, it.CMID, it.Code, it.Msg)})
		}
		return vs
	}
	k := seqKey{it.Conv, it.Seq}
	if other, ok := claimed[k]; ok {
		vs = append(vs, Violation{Kind: VOutbox, Device: name, Conv: it.Conv, Detail: fmt.Sprintf("items %s and %s/%s both landed at seq %d", other, name, it.CMID, it.Seq)})
	}
	claimed[k] = name + "/" + it.CMID
	ev, found := eventAt(c, it.Seq)
	switch {
	case !found:
		vs = append(vs, Violation{Kind: VOutbox, Device: name, Conv: it.Conv, Detail: fmt.Sprintf("%s item %s was answered seq %d, which the log does not hold", it.Kind, it.CMID, it.Seq)})
	case ev.Sender != user || ev.Kind != kindOf(it.Kind) ||
		(it.Kind == client.KindSend && !ev.Recalled && ev.Body != it.Body) ||
		(it.Kind == client.KindRecall && ev.Target != it.Target):
		vs = append(vs, Violation{Kind: VOutbox, Device: name, Conv: it.Conv, Detail: fmt.Sprintf("%s item %s was answered seq %d, which holds %s by %s", it.Kind, it.CMID, it.Seq, ev.Kind, ev.Sender)})
	}
	return vs
}

// checkOrphans reports every committed message or recall by a user of the
// run that no outbox item ended with (claimed): a doubled or phantom send.
func checkOrphans(t Truth, convIDs []string, devs []DeviceLog, claimed map[seqKey]string) []Violation {
	var vs []Violation
	users := map[string]bool{}
	for _, d := range devs {
		users[d.User] = true
	}
	for _, id := range convIDs {
		for _, ev := range t.Convs[id].Events {
			if ev.Kind != string(parley.EventMessage) && ev.Kind != string(parley.EventRecall) {
				continue
			}
			if !users[ev.Sender] {
				continue // not sent by a device of the run
			}
			if _, ok := claimed[seqKey{id, ev.Seq}]; !ok {
				vs = append(vs, Violation{Kind: VOrphan, Conv: id, Detail: fmt.Sprintf("%s at seq %d by %s (%q) was committed but no outbox item ended with it: a doubled or phantom send", ev.Kind, ev.Seq, ev.Sender, clip(ev.Body))})
			}
		}
	}
	return vs
}

// checkUnread holds each unread count to what the log implies for the read
// cursor reported with it.
func checkUnread(t Truth, unread []UnreadObs) []Violation {
	var vs []Violation
	for _, u := range unread {
		c := t.Convs[u.Conv]
		if c == nil {
			continue
		}
		want := expectedUnread(c, u.User, u.Read)
		capped := want > parley.UnreadCap
		want = min(want, parley.UnreadCap)
		if u.Unread != want || u.Capped != capped {
			vs = append(vs, Violation{Kind: VUnread, Device: u.User, Conv: u.Conv, Detail: fmt.Sprintf("unread %d (capped %v) at read %d, the log implies %d (capped %v)", u.Unread, u.Capped, u.Read, want, capped)})
		}
	}
	return vs
}

func kindOf(k client.Kind) string {
	if k == client.KindRecall {
		return string(parley.EventRecall)
	}
	return string(parley.EventMessage)
}

func eventAt(c *ConvLog, seq int64) (wire.Event, bool) {
	i, ok := slices.BinarySearchFunc(c.Events, seq, func(ev wire.Event, s int64) int {
		switch {
		case ev.Seq < s:
			return -1
		case ev.Seq > s:
			return 1
		}
		return 0
	})
	if !ok {
		return wire.Event{}, false
	}
	return c.Events[i], true
}

// explained reports whether the log explains the terminal code an item
// ended with.
func explained(c *ConvLog, user string, it client.Item) bool {
	switch it.Code {
	case parley.CodeNotMember:
		return c.left(user)
	case parley.CodeAlreadyRecalled:
		if it.Kind != client.KindRecall {
			return false
		}
		for _, ev := range c.Events {
			if ev.Kind == string(parley.EventRecall) && ev.Target == it.Target {
				return true
			}
		}
	}
	return false
}

// expectedUnread counts the visible messages by others after read that
// are not recalled.
func expectedUnread(c *ConvLog, user string, read int64) int64 {
	var n int64
	for _, ev := range c.Visible(user) {
		if ev.Seq > read && ev.Kind == string(parley.EventMessage) && ev.Sender != user && !ev.Recalled {
			n++
		}
	}
	return n
}

// compareLog returns what is wrong with got against want, or "".
func compareLog(want []wire.Event, got []Applied) string {
	var last int64
	seen := map[int64]bool{}
	for i, a := range got {
		if seen[a.Seq] {
			return fmt.Sprintf("seq %d applied twice (at positions %d)", a.Seq, i)
		}
		seen[a.Seq] = true
		if a.Seq <= last {
			return fmt.Sprintf("seq %d applied after seq %d: out of order", a.Seq, last)
		}
		last = a.Seq
	}
	for i := 0; i < max(len(want), len(got)); i++ {
		switch {
		case i >= len(got):
			return fmt.Sprintf("missing seq %d (%s by %s) and %d more at the end: applied %d of %d visible events", want[i].Seq, want[i].Kind, want[i].Sender, len(want)-i-1, len(got), len(want))
		case i >= len(want):
			return fmt.Sprintf("seq %d (%s) applied but not visible to the user (outside its membership periods or never committed)", got[i].Seq, got[i].Kind)
		}
		w := appliedOf(want[i])
		g := got[i]
		if g.Seq > w.Seq {
			return fmt.Sprintf("missing seq %d (%s by %s): a gap before applied seq %d", w.Seq, w.Kind, w.Sender, g.Seq)
		}
		if g.Seq < w.Seq {
			return fmt.Sprintf("seq %d (%s) applied but not visible to the user (outside its membership periods or never committed)", g.Seq, g.Kind)
		}
		if g != w {
			return fmt.Sprintf("seq %d applied as %s %s by %s, committed as %s %s by %s", g.Seq, g.Kind, g.MID, g.Sender, w.Kind, w.MID, w.Sender)
		}
	}
	return ""
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
