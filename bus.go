package parley

import "context"

// Notice announces a committed change to the gateways. It carries ids only,
// never bodies: a gateway that hears of (Conv, Seq) reads what it needs from
// the Store, with the visibility rules of the Store.
//
// An event notice (Device empty) says seq Seq of Conv is committed; when
// the event is a membership change, User names the member it concerns, so a
// gateway that does not watch Conv yet learns that one of its users joined.
// A read-cursor notice (Device set) says User's read cursor in Conv is now
// Seq, moved from Device; the user's other devices get a hint.
// An account notice (Conv empty, User set, Seq 0) says User's account
// changed (disabled, logged out): every gateway checks that user's sockets
// again at once and forgets cached lookups of the user's tokens.
type Notice struct {
	Conv   string
	Seq    int64
	User   string
	Device string
}

// Read reports whether n is a read-cursor notice.
func (n Notice) Read() bool { return n.Device != "" }

// Account reports whether n is an account notice.
func (n Notice) Account() bool { return n.Conv == "" && n.User != "" }

// AccountNotice returns the account notice of user.
func AccountNotice(user string) Notice { return Notice{User: user} }

// Bus carries notices between the gateways of one deployment.
//
// Delivery guarantee: best effort and at most once, in publish order per
// publisher. A notice can be lost (a publisher that dies between commit and
// publish, a dropped connection), duplicated, or arrive after a later seq of
// the same conversation from another publisher. Receivers must therefore
// treat notices as hints: a seq gap is filled by reading the Store, a
// conversation's head is polled now and then as a backstop, and BusHandler.Lost
// says that notices may have been missed since some point, so the receiver
// reads the store for what they would have said.
//
// Publish is called only after the change has committed (never inside the
// transaction: SPEC §3.1) and never blocks on the network: implementations
// buffer and send in batches.
type Bus interface {
	// Publish queues notices for every gateway, this one included. It never
	// blocks and never fails; a notice it cannot send is lost (see above).
	Publish(ns ...Notice)

	// Run delivers notices to h until ctx ends, then returns ctx.Err(). It
	// owns the bus's goroutines and connections. h's methods are called from
	// one goroutine, one at a time.
	Run(ctx context.Context, h BusHandler) error
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
