// Package fault holds Parley's named fault points: places in the
// code where a lab run can crash the process, make the call fail with
// UNAVAILABLE, or delay it, to prove that nothing is lost or doubled when
// that happens for real.
//
// Points are armed only by an explicit setting, the PARLEY_FAULTS
// environment variable read by `parley serve`:
//
//	PARLEY_FAULTS=api.after_send_commit=crash,store.before_commit=unavailable@2
//
// Each entry is point=action[@N]. Actions: crash (the process kills itself
// with SIGKILL, as a power cut would), unavailable (the call fails with
// UNAVAILABLE), delay:DURATION (the call sleeps, then goes on), drop (the
// call skips its work: a push that is never sent, a publish that is lost),
// dup (the call does its work twice: a send committed again under another
// key). Two points exist only to break the server on purpose, so the
// acceptance checker of `parley bench` can be shown to fail:
// gateway.sync=drop (a sync page loses its first event) and
// gateway.send=dup (a socket send is committed twice).
// With @N the action fires only on the Nth hit of the point (1-based, counted
// per process): export.after_shard=crash@3 dies after the third shard.
// Without it, it fires on every hit.
//
// Disarmed, a point costs one atomic load: Hit returns nil at once.
package fault

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/parleychat/parley"
)

// The named points. Code calls Hit with one of these.
//
// The store's two sit on the one path every send and recall takes, on both
// stores: store.before_insert before the store call's write (PostgreSQL:
// before the statement that calls parley_send_many or parley_recall;
// SQLite: before BEGIN IMMEDIATE), store.before_commit after that write,
// only when it inserted an event, and before its commit. No point sits
// between the key lookup and the insert: on PostgreSQL both run inside the
// database, in one function call.
const (
	StoreBeforeInsert  = "store.before_insert"   // send batch/recall: about to run its write, nothing written (once per store call)
	StoreBeforeCommit  = "store.before_commit"   // send batch/recall: its write inserted, not committed
	APIAfterSendCommit = "api.after_send_commit" // send committed, reply not yet written
	BusPublish         = "bus.publish"           // a notice is about to be published
	ExportAfterShard   = "export.after_shard"    // an export shard was written
	ExportWrite        = "export.write"          // an export file is about to be written (unavailable: the write fails, as on a full disk)
	GatewayPush        = "gateway.push"          // an event push is about to be queued to a socket
	GatewaySync        = "gateway.sync"          // a socket sync page is about to be answered (drop: it loses its first event)
	GatewaySend        = "gateway.send"          // a socket send committed (dup: it is committed again under another key)
	UploadAfterBlob    = "upload.after_blob"     // a finished upload's bytes are in the blob store, its row not yet ready
)

// Points lists every named point; Arm refuses other names.
var Points = []string{
	StoreBeforeInsert, StoreBeforeCommit,
	APIAfterSendCommit, BusPublish, ExportAfterShard, ExportWrite, GatewayPush,
	GatewaySync, GatewaySend, UploadAfterBlob,
}

// Action is what an armed point does.
type Action int

const (
	Crash Action = iota + 1
	Unavailable
	Delay
	Drop
	Dup
)

type rule struct {
	action Action
	delay  time.Duration
	nth    int64 // fire only on this hit (0: every hit)
	hits   atomic.Int64
}

var armed atomic.Pointer[map[string]*rule]

// ErrDropped is what Hit returns for a point armed with drop: the caller
// skips its work.
var ErrDropped = parley.Errorf(parley.CodeUnavailable, "fault: dropped")

// ErrDuplicate is what Hit returns for a point armed with dup: the caller
// does its work a second time.
var ErrDuplicate = parley.Errorf(parley.CodeUnavailable, "fault: duplicated")

// Arm parses a PARLEY_FAULTS value and arms its points, replacing any
// earlier setting. An empty spec disarms everything.
func Arm(spec string) error {
	rules, err := parse(spec)
	if err != nil {
		return err
	}
	if len(rules) == 0 {
		armed.Store(nil)
		return nil
	}
	armed.Store(&rules)
	return nil
}

// parse parses a PARLEY_FAULTS value without arming it.
func parse(spec string) (map[string]*rule, error) {
	rules := map[string]*rule{}
	for _, entry := range strings.Split(spec, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, act, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, fmt.Errorf("fault %q: want point=action[@N]", entry)
		}
		if !slices.Contains(Points, name) {
			return nil, fmt.Errorf("fault %q: unknown point %q (known: %s)", entry, name, strings.Join(Points, ", "))
		}
		r := &rule{}
		if a, n, ok := strings.Cut(act, "@"); ok {
			nth, err := strconv.ParseInt(n, 10, 64)
			if err != nil || nth < 1 {
				return nil, fmt.Errorf("fault %q: @N must be a whole number from 1", entry)
			}
			r.nth, act = nth, a
		}
		switch {
		case act == "crash":
			r.action = Crash
		case act == "unavailable":
			r.action = Unavailable
		case act == "drop":
			r.action = Drop
		case act == "dup":
			r.action = Dup
		case strings.HasPrefix(act, "delay:"):
			d, err := time.ParseDuration(strings.TrimPrefix(act, "delay:"))
			if err != nil || d < 0 {
				return nil, fmt.Errorf("fault %q: bad delay", entry)
			}
			r.action, r.delay = Delay, d
		default:
			return nil, fmt.Errorf("fault %q: unknown action %q (crash, unavailable, drop, dup, delay:DURATION)", entry, act)
		}
		if _, dup := rules[name]; dup {
			return nil, fmt.Errorf("fault %q: point %s armed twice", entry, name)
		}
		rules[name] = r
	}
	return rules, nil
}

// Armed reports whether point is armed at all (whatever its @N). Code uses
// it to take a slower path only in lab runs, such as sending COMMIT as its
// own round trip so a fault can sit before it.
func Armed(point string) bool {
	m := armed.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[point]
	return ok
}

// Hit passes fault point. Disarmed, or armed for another hit, it returns
// nil. Armed, it crashes the process, sleeps, or returns an UNAVAILABLE
// error (ErrDropped for drop, ErrDuplicate for dup) that the caller
// returns as it would a real failure at that place.
func Hit(point string) error {
	m := armed.Load()
	if m == nil {
		return nil
	}
	r, ok := (*m)[point]
	if !ok {
		return nil
	}
	if n := r.hits.Add(1); r.nth != 0 && n != r.nth {
		return nil
	}
	switch r.action {
	case Crash:
		fmt.Fprintf(os.Stderr, "fault: %s: crash\n", point)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL cannot be caught; wait for it to land
	case Delay:
		// Said before the sleep, so a lab run (or a test) knows the call
		// is being held now.
		fmt.Fprintf(os.Stderr, "fault: %s: delay %v\n", point, r.delay)
		time.Sleep(r.delay)
		return nil
	case Drop:
		return ErrDropped
	case Dup:
		return ErrDuplicate
	}
	return parley.Errorf(parley.CodeUnavailable, "fault: %s", point)
}
