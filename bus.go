package parley

import (
	"context"
	"reflect"
	"time"
)

// Notice announces a committed change to the gateways. It carries ids, and
// may carry the committed event itself: a gateway that hears of (Conv, Seq)
// pushes the carried event when it has one and knows the event's audience,
// and otherwise reads what it needs from the Store (Feeder.Feed), with the
// visibility rules of the Store.
//
// An event notice (Device empty) says seq Seq of Conv is committed; when
// the event is a membership change, User names the member it concerns, so a
// gateway that does not watch Conv yet learns that one of its users joined.
// A read-cursor notice (Device set) says User's read cursor in Conv is now
// Seq, moved from Device; the user's other devices get a hint.
// An account notice (Conv empty, User set, Seq 0) says User's account
// changed (disabled, logged out): every gateway checks that user's sockets
// again at once and forgets cached lookups of the user's tokens.
//
// Event, on an event notice, is the committed event of (Conv, Seq) as a
// member sees it, and Epoch the conversation's epoch it was committed in.
// Publishers attach it only when Body is at most MaxNoticeBody bytes (ids
// only above it), and a bus may drop it (ids only) where its transport
// cannot carry it: receivers handle both. Event is shared, never modified.
//
// A signal notice (Kind NoticeTyping or NoticePresence, signal.go) is
// no committed change: User is typing in Conv until At, or User's
// presence is now State, last seen At. It carries Conv, User, At (whole
// milliseconds) and, for presence, State; nothing else (ValidSignal).
type Notice struct {
	Conv   string
	Seq    int64
	User   string
	Device string
	Event  *Event
	Epoch  int64

	Kind  NoticeKind
	State PresenceState
	At    time.Time
}

// MaxNoticeBody bounds the body of an event a notice carries: larger
// events travel as ids and are read from the store by each gateway that
// pushes them. 4096 bytes covers a message of 4,000 ASCII characters.
const MaxNoticeBody = 4096

// WithEvent returns n carrying ev (committed in epoch) when ev's body is
// within MaxNoticeBody, and n unchanged otherwise.
func (n Notice) WithEvent(ev Event, epoch int64) Notice {
	if len(ev.Body) <= MaxNoticeBody && ev.Conv == n.Conv && ev.Seq == n.Seq && epoch > 0 {
		n.Event, n.Epoch = &ev, epoch
	}
	return n
}

// SentNotice is the notice of a committed send (WebSocket, HTTP, webhook):
// ids, and the event as a member sees it when the store reported its commit
// time (sent.At), so that gateways watching the conversation push it
// without reading the store. A replay (sent.Dup) publishes ids only: its
// event was announced when it was committed. So does a send with
// attachments: what the event carries of each file is the store's.
func SentNotice(p Principal, req SendRequest, sent Sent) Notice {
	n := Notice{Conv: sent.Conv, Seq: sent.Seq}
	if sent.Dup || sent.At.IsZero() || req.ReplyTo != 0 || HasMentionToken(req.Body) || len(req.Attachments) > 0 {
		// A reply's root, a message's mentions and its attachments are
		// the store's to decide: the gateways read such an event back.
		return n
	}
	return n.WithEvent(Event{
		Conv: sent.Conv, Seq: sent.Seq, MID: sent.MID, Kind: EventMessage,
		Sender: p.User, Device: p.DeviceID, Body: req.Body, At: sent.At,
	}, sent.Epoch)
}

// RecalledNotice is the notice of a committed recall: ids only. The recall
// event as a member sees it is not fully known to the caller (Recalled
// reports neither its mid, nor its time, nor the epoch), and a gateway
// reads a recall from the store anyway, since it changes how the recalled
// message is served.
func RecalledNotice(rec Recalled) Notice { return Notice{Conv: rec.Conv, Seq: rec.Seq} }

// Same reports whether n and m say the same: equal ids and equal carried
// events (compared by value, not by pointer).
func (n Notice) Same(m Notice) bool {
	if n.Conv != m.Conv || n.Seq != m.Seq || n.User != m.User || n.Device != m.Device || n.Epoch != m.Epoch {
		return false
	}
	if n.Kind != m.Kind || n.State != m.State || !n.At.Equal(m.At) {
		return false
	}
	if n.Event == nil || m.Event == nil {
		return n.Event == m.Event
	}
	a, b := *n.Event, *m.Event
	if !a.At.Equal(b.At) {
		return false
	}
	a.At, b.At = time.Time{}, time.Time{} // one instant, whatever its location
	return reflect.DeepEqual(a, b)
}

// Read reports whether n is a read-cursor notice.
func (n Notice) Read() bool { return n.Kind == NoticeCommitted && n.Device != "" }

// Account reports whether n is an account notice.
func (n Notice) Account() bool { return n.Kind == NoticeCommitted && n.Conv == "" && n.User != "" }

// AccountNotice returns the account notice of user.
func AccountNotice(user string) Notice { return Notice{User: user} }

// Bus carries notices between the gateways of one deployment.
//
// Interest. A gateway declares what it hears (Bus.Interest): the
// conversations its subscribed sockets watch and the users it has sockets
// of. Routing is then:
//   - an event notice reaches every gateway that watches Conv, and one
//     naming a member (User set) also every gateway that serves User;
//   - a read-cursor notice and an account notice reach every gateway that
//     serves User;
//   - a signal notice (typing, presence) reaches every gateway that
//     watches Conv. Presence is published once per conversation of the
//     user (PresenceNotices), so that a bus routing by conversation
//     brings it to every gateway with a socket that shares one with the
//     user; receivers drop the repeats.
//
// That is all a receiver may rely on. A bus may deliver more (the
// in-process and PostgreSQL buses deliver every notice to every gateway; a
// bus that routes by broker subject may deliver neighbours of a watched
// conversation): receivers ignore what they do not need. A bus that
// reports itself Selective (see bustest) delivers nothing outside the
// interest declared when the notice arrives. Interest is a property of the
// bus value, kept across Run calls, and applied soon rather than at once:
// a notice published just after Interest returns may miss the new
// interest (the subscription is on its way to the broker); the receiver
// covers that window as it covers any gap (the gateway's backstop poll).
//
// Delivery guarantee: best effort and at most once, in publish order per
// publisher and per conversation (event notices) or per user (read-cursor
// and account notices), and, among themselves, per conversation (signal
// notices, which may overtake event notices and be overtaken by them):
// notices of different conversations may overtake each other. A notice can be lost (a publisher that dies between commit
// and publish, a dropped connection), duplicated, or arrive after a later
// seq of the same conversation from another publisher. Receivers must
// therefore treat notices as hints: a seq gap is filled by reading the
// Store, a conversation's head is polled now and then as a backstop, and
// BusHandler.Lost says that notices may have been missed since some point,
// so the receiver reads the store for what they would have said.
//
// Carried events: a notice arrives with the event it was published with
// (Notice.Event, Epoch), or as ids only when the event is over the bus's
// bound; never with another event. Every bus's bound is at least
// MaxNoticeBody, so an event a publisher attaches (WithEvent) arrives with
// its notice; bustest states each bus's bound and checks it.
//
// Publish is called only after the change has committed (never inside the
// transaction) and never blocks on the network: implementations
// buffer and send in batches.
type Bus interface {
	// Publish queues notices for every interested gateway, this one
	// included. It never blocks and never fails; a notice it cannot send
	// is lost (see above).
	Publish(ns ...Notice)

	// Run delivers notices to h until ctx ends, then returns ctx.Err(). It
	// owns the bus's goroutines and connections. h's methods are called from
	// one goroutine, one at a time.
	Run(ctx context.Context, h BusHandler) error

	// Interest changes what this gateway hears. It never blocks on the
	// network and may be called at any time, from any goroutine, before
	// and during Run. Ids are a set: watching a watched conversation again
	// is a no-op, and one Unwatch ends it; the caller counts its sockets.
	Interest(in Interest)
}

// Interest is a change of what one gateway hears from the bus: Watch and
// Unwatch are conversation ids its sockets start and stop watching, Serve
// and Unserve user ids it starts and stops having sockets of. Removals
// apply after additions.
type Interest struct {
	Watch, Unwatch []string
	Serve, Unserve []string
}

// Empty reports whether in changes nothing.
func (in Interest) Empty() bool {
	return len(in.Watch)+len(in.Unwatch)+len(in.Serve)+len(in.Unserve) == 0
}

// BusHandler receives what a Bus delivers.
type BusHandler interface {
	// Notify receives a batch of notices, in order per publisher.
	Notify(ns []Notice)
	// Lost says notices may have been missed (the bus lost its connection
	// and reconnected, or dropped what it buffered): the receiver must
	// recover what they would have said. The gateway polls the store for
	// it and resyncs its sockets only when that fails (gateway.Hub.Lost).
	// Lost must not block.
	Lost()
}
