package postgres

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/busqueue"
)

// Application names of the bus's two connections, as pg_stat_activity
// shows them (any application_name in the DSN is overridden).
const (
	BusListenApp  = "parley-bus-listen"
	BusPublishApp = "parley-bus-publish"
)

// BusOptions tunes a Bus. The zero value is the production setting.
type BusOptions struct {
	// Channel is the NOTIFY channel, [A-Za-z0-9_]{1,63}; every gateway of
	// a deployment uses the same one. Default "parley".
	Channel string
	// FlushEvery is the least time between two sends of buffered notices:
	// a notice published after a quiet spell is sent at once, those
	// published while a send is recent wait for the next one. Default 5ms.
	FlushEvery time.Duration
	// MaxBuffered bounds the notices waiting to be sent, and separately
	// those waiting for the handler. Default 65536.
	MaxBuffered int
	// Timeout bounds every network call: connect, LISTEN, NOTIFY, ping,
	// close. Default 5s.
	Timeout time.Duration
	// PingEvery is how long the listener waits for a notification before
	// it pings the server, so that a connection that died silently (no
	// RST from a vanished host) is noticed. Default 15s.
	PingEvery time.Duration
	// Logger receives connection failures and malformed payloads. Default
	// slog.Default().
	Logger *slog.Logger
	// SkipOwn drops, unread, the notifications this bus's own publishing
	// connection sent (its backend pid), loss markers included: for a
	// publisher that has already handed its notices to its own handler,
	// as gateway.Hub.Publish does, so hearing them back is decoding for
	// nothing. Off, the bus keeps the parley.Bus contract's "this one
	// included". (Should the publishing connection die unnoticed and
	// PostgreSQL give its pid to another gateway's publisher, that one's
	// notices would be dropped here until the bus reconnects; the
	// gateway's backstop poll covers that, as any lost notice.)
	SkipOwn bool
}

func (o BusOptions) withDefaults() BusOptions {
	if o.Channel == "" {
		o.Channel = "parley"
	}
	if o.FlushEvery <= 0 {
		o.FlushEvery = 5 * time.Millisecond
	}
	if o.MaxBuffered <= 0 {
		o.MaxBuffered = 65536
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.PingEvery <= 0 {
		o.PingEvery = 15 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Bus is a parley.Bus over PostgreSQL LISTEN/NOTIFY, for deployments with
// several gateways on one database. It needs no tables.
//
// Beyond the parley.Bus contract:
//   - Publish only appends to a bounded buffer. Run's flusher sends the
//     buffer, at most once per FlushEvery, in as few pg_notify calls as the
//     8000-byte payload limit allows, all in one statement. A batch whose
//     send fails is dropped (its outcome is unknown, and at most once is the
//     contract), and the connection is re-established with backoff.
//   - Notices the publisher drops (buffer overflow, failed send) are not
//     silent: the next payload it sends carries a loss marker, on which
//     every gateway, this one included, calls Lost. A publisher that dies
//     cannot do that; the receivers' backstop poll covers it.
//   - Run's listener holds one connection that LISTENs on the channel.
//     PostgreSQL delivers a NOTIFY to every listener, this bus's own
//     included, so a gateway hears its own notices back, as the contract
//     asks ("every gateway, this one included"), unless
//     BusOptions.SkipOwn drops them (`parley serve` sets it: the gateway
//     has pushed its own notices already).
//   - When the listening connection fails, the listener reconnects with
//     exponential backoff and jitter (capped at 2s), LISTENs again, and
//     then calls Lost: notices sent meanwhile were missed. It does the same
//     after a first connection that needed retries.
//   - The listener never waits for the handler (a listener that stops
//     reading holds back the server's notification queue for everyone):
//     notices are buffered for a delivery goroutine, bounded like the
//     publish buffer, and an overflow becomes Lost.
//   - Interest is accepted and ignored: every gateway LISTENs on the one
//     channel and hears every notice (the bus is not Selective), so the
//     cost per notice grows with the number of gateways (docs/capacity.md).
//   - A carried event (Notice.Event) travels with its notice, so the
//     gateways that push it need no store read: every event a notice may
//     carry (a body up to parley.MaxNoticeBody) fits in one 8000-byte
//     payload. Notices are packed into payloads as they come, so a payload
//     holds a few dozen carried messages of ordinary length, or a single
//     one near the bound. An event the format cannot hold exactly (a body
//     over the bound, a time finer than a millisecond) goes as ids only.
//   - Payloads on the channel that do not parse (another program notifying
//     on it, a newer payload version) are logged and skipped.
//
// The bus needs a session-level connection: LISTEN does not work through a
// pooler in transaction mode.
type Bus struct {
	cfg  *pgx.ConnConfig
	opts BusOptions
	log  *slog.Logger

	out     busqueue.Queue // published, not yet sent
	in      busqueue.Queue // received, not yet delivered
	running atomic.Bool

	// Backend pids of the two connections (0: none), for tests.
	listenPID, publishPID atomic.Uint32
}

var _ parley.Bus = (*Bus)(nil)

// NewBus returns a bus on the database at dsn (the DSN Open takes; pool
// settings are ignored). It only parses: connections are made by Run, so a
// database that is down at start is retried, not fatal.
func NewBus(dsn string, opts BusOptions) (*Bus, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: bus: parse dsn: %w", err)
	}
	opts = opts.withDefaults()
	if !validChannel(opts.Channel) {
		return nil, fmt.Errorf("postgres: bus: channel %q must match [A-Za-z0-9_]{1,63}", opts.Channel)
	}
	b := &Bus{cfg: pcfg.ConnConfig, opts: opts, log: opts.Logger}
	b.out.Init(opts.MaxBuffered)
	b.in.Init(opts.MaxBuffered)
	return b, nil
}

func validChannel(s string) bool {
	if len(s) < 1 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Publish queues ns to be sent. It never blocks and never touches the
// network. (The bus.publish fault point is the gateway's: it drops the
// local fan-out and the publish together, as a dead publisher would.)
func (b *Bus) Publish(ns ...parley.Notice) {
	if len(ns) > 0 {
		b.out.Push(false, ns)
	}
}

// Interest is a no-op: every gateway hears every notice.
func (b *Bus) Interest(parley.Interest) {}

// Run connects, delivers notices to h until ctx ends, closes its
// connections, and returns ctx.Err(). Notices still buffered when ctx ends
// get one last send if the publishing connection is up; a send in progress
// is finished, not abandoned, so Run can take up to about twice Timeout to
// return on a server that has stopped answering (milliseconds on one that
// answers). Only one Run may be active at a time; a second gets an error.
func (b *Bus) Run(ctx context.Context, h parley.BusHandler) error {
	if !b.running.CompareAndSwap(false, true) {
		return errors.New("postgres: bus: Run is already running")
	}
	defer b.running.Store(false)
	var wg sync.WaitGroup
	wg.Go(func() { b.flushLoop(ctx) })
	wg.Go(func() { b.listenLoop(ctx) })
	b.in.Deliver(ctx, h)
	wg.Wait()
	return ctx.Err()
}

// connect opens one of the bus's connections, named app, within Timeout.
func (b *Bus) connect(ctx context.Context, app string) (*pgx.Conn, error) {
	cfg := b.cfg.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = app
	cctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
	defer cancel()
	return pgx.ConnectConfig(cctx, cfg)
}

// closeConn closes c within Timeout, even after ctx has ended.
func (b *Bus) closeConn(ctx context.Context, c *pgx.Conn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.opts.Timeout)
	defer cancel()
	c.Close(cctx)
}

// flushLoop sends what Publish buffers.
func (b *Bus) flushLoop(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			b.closeConn(ctx, conn)
		}
	}()
	var next time.Time // no send before this
	var used time.Time // last successful send (or connect)
	failures := 0
	b.out.Signal() // connect now, not at the first publish
	for {
		select {
		case <-ctx.Done():
			if conn != nil && !conn.IsClosed() {
				// A gateway shutting down still tells the others what it
				// committed last, if it can do so quickly.
				ns, lost := b.out.Take()
				if err := b.send(ctx, conn, lost, ns); err != nil {
					b.log.Warn("postgres: bus: last send before shutdown failed", "notices", len(ns), "err", err)
				}
			}
			return
		case <-b.out.Wake():
		}
		if !sleep(ctx, time.Until(next)) {
			continue // ctx ended: the case above does the last send
		}
		if conn != nil && time.Since(used) > b.opts.PingEvery {
			// A connection idle for long may have been closed under us (an
			// idle timeout, a failover). Find out before sending, when a
			// failure costs nothing, rather than by a failed send, which
			// costs every gateway a resync.
			pctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				b.log.Info("postgres: bus: idle publishing connection is gone; reconnecting", "err", err)
				b.publishPID.Store(0)
				b.closeConn(ctx, conn)
				conn = nil
			}
		}
		if conn == nil {
			var err error
			if conn, err = b.connect(ctx, BusPublishApp); err != nil {
				if ctx.Err() != nil {
					continue
				}
				failures++
				b.log.Warn("postgres: bus: cannot connect to publish; notices wait", "err", err, "attempt", failures)
				next = time.Now().Add(backoff(failures))
				b.out.Signal() // retry with what is buffered
				continue
			}
			b.publishPID.Store(conn.PgConn().PID())
			used = time.Now()
		}
		ns, lost := b.out.Take()
		if err := b.send(ctx, conn, lost, ns); err != nil {
			failures++
			b.log.Warn("postgres: bus: send failed; notices dropped, loss announced on reconnect", "notices", len(ns), "err", err, "attempt", failures)
			b.out.Push(true, nil)
			b.publishPID.Store(0)
			b.closeConn(ctx, conn)
			conn = nil
			next = time.Now().Add(backoff(failures))
			continue
		}
		failures = 0
		used = time.Now()
		next = used.Add(b.opts.FlushEvery)
	}
}

// notifySQL sends many payloads in one statement (one round trip, one
// transaction: listeners get them together, in order).
const notifySQL = `SELECT pg_notify($1, p) FROM unnest($2::text[]) WITH ORDINALITY AS t(p, i) ORDER BY i`

// maxPayloadsPerStatement keeps one statement near 1 MB.
const maxPayloadsPerStatement = 128

// send sends ns (and the loss marker, if lost) on conn. A send is not
// abandoned when ctx ends (that would leave its outcome unknown and the
// connection broken); it is bounded by Timeout instead.
func (b *Bus) send(ctx context.Context, conn *pgx.Conn, lost bool, ns []parley.Notice) error {
	ctx = context.WithoutCancel(ctx)
	payloads, bad := encodeNotices(lost, ns, maxPayload)
	if bad > 0 {
		b.log.Error("postgres: bus: dropped malformed notices (a caller bug)", "count", bad)
	}
	for len(payloads) > 0 {
		chunk := payloads[:min(len(payloads), maxPayloadsPerStatement)]
		payloads = payloads[len(chunk):]
		sctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
		_, err := conn.Exec(sctx, notifySQL, b.opts.Channel, chunk)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// listenLoop keeps a LISTENing connection and buffers what it hears.
func (b *Bus) listenLoop(ctx context.Context) {
	missed := false // notices may have been missed since the last LISTEN
	failures := 0
	for {
		conn, err := b.listen(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			missed = true
			failures++
			b.log.Warn("postgres: bus: cannot listen; retrying", "err", err, "attempt", failures)
			if !sleep(ctx, backoff(failures)) {
				return
			}
			continue
		}
		if missed {
			b.in.Push(true, nil)
		}
		start := time.Now()
		err = b.receive(ctx, conn)
		b.listenPID.Store(0)
		b.closeConn(ctx, conn)
		if ctx.Err() != nil {
			return
		}
		missed = true
		if time.Since(start) > time.Minute {
			failures = 0
		}
		failures++
		b.log.Warn("postgres: bus: listening connection lost; reconnecting", "err", err)
		// The first retry is immediate (a killed backend, a failover);
		// later ones back off.
		if !sleep(ctx, backoff(failures-1)) {
			return
		}
	}
}

// listen connects and LISTENs.
func (b *Bus) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := b.connect(ctx, BusListenApp)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
	defer cancel()
	if _, err := conn.Exec(lctx, "LISTEN "+pgx.Identifier{b.opts.Channel}.Sanitize()); err != nil {
		b.closeConn(ctx, conn)
		return nil, err
	}
	b.listenPID.Store(conn.PgConn().PID())
	return conn, nil
}

// receive reads notifications from conn until it fails or ctx ends.
func (b *Bus) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, b.opts.PingEvery)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if n != nil && !(b.opts.SkipOwn && n.PID == b.publishPID.Load()) {
			ns, lost, derr := decodeNotices(n.Payload)
			if derr != nil {
				b.log.Warn("postgres: bus: skipped a payload that is not ours", "channel", n.Channel, "sender_pid", n.PID, "err", derr)
			} else {
				b.in.Push(lost, ns)
			}
		}
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, context.DeadlineExceeded) || conn.IsClosed() {
			return err
		}
		// Quiet for PingEvery: make sure the connection is still there.
		pctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return fmt.Errorf("ping: %w", err)
		}
	}
}

// backoff is the wait before retry n (1-based; 0 for n < 1): exponential
// from 50ms, capped at 2s, with jitter so gateways that lost the same
// server do not come back in step.
func backoff(n int) time.Duration {
	if n < 1 {
		return 0
	}
	d := 2 * time.Second
	if n < 7 {
		d = min(d, 50*time.Millisecond<<(n-1))
	}
	return d/2 + rand.N(d/2+1)
}

// sleep waits d or until ctx ends, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// The payload format. A payload is lines separated by "\n":
//
//	p1 | p2                 header: the format version (p2 when the payload
//	                        has a carried event, so that a gateway of the
//	                        version before still reads every payload of ids)
//	!                       optional: the sender dropped notices before these
//	CONV SEQ                an event notice
//	CONV SEQ USER           an event notice naming a member
//	CONV SEQ USER DEVICE    a read-cursor notice
//	@USER                   an account notice
//	+CONV SEQ USER EPOCH AT MID KIND SENDER DEVICE TARGET EVUSER FLAGS BODY
//	                        (p2) an event notice with its event: USER is
//	                        empty unless the notice names a member; AT is
//	                        the event's time in Unix milliseconds; FLAGS is
//	                        1 (recalled) + 2 (BODY is base64)
//
// Signal notices (typing, presence) go in payloads of their own, headed
// "s1", so that a gateway of a version without them skips those payloads
// whole and still reads every payload of committed changes:
//
//	s1                      header
//	t CONV USER UNTIL       a typing notice (UNTIL in Unix milliseconds)
//	p CONV USER STATE AT    a presence notice (STATE online, away or
//	                        offline; AT, the last seen time, in Unix ms)
//
// Fields are separated by one space; on a '+' line a field may be empty,
// and BODY, the last, runs to the end of the line. CONV
// ([A-Za-z0-9._:-]{1,64}) and USER ([a-z0-9][a-z0-9._-]{0,31}) cannot
// contain a space or newline. SEQ, EPOCH, AT, TARGET are non-negative
// decimals. DEVICE, MID, KIND and SENDER are text (up to 64 characters of
// UTF-8 without NUL), so they are escaped: '%', every byte up to ' ' and
// DEL become %XX. BODY (up to MaxNoticeBody bytes of UTF-8 without NUL)
// has only '%' and '\n' escaped, or is in base64 (standard alphabet,
// unpadded) when that is shorter: a body full of newlines then takes 4/3
// of its size, not 3 times, and every event a notice may carry fits in a
// payload (TestNoticeCodecLargestCarried). A payload that does not parse
// entirely is rejected whole.
const (
	payloadHeader = "p1"
	carriedHeader = "p2"
	signalHeader  = "s1"
	lostLine      = "!"
	carriedPrefix = '+'
	carriedFields = 13
	flagRecalled  = 1
	flagBase64    = 2
	maxShortText  = 64 // characters of MID, KIND
	// maxPayload: PostgreSQL refuses payloads of 8000 bytes or more.
	maxPayload     = 7999
	maxCarriedLine = maxPayload - len(carriedHeader) - 1
)

// encodeNotices packs ns into as few payloads of at most max bytes as it
// can, the loss marker first if lost. A notice's carried event goes along
// when carriable (and as ids only otherwise). It skips (and counts)
// notices that the format cannot carry at all: malformed ids, a negative
// seq, a device without a user.
func encodeNotices(lost bool, ns []parley.Notice, max int) (payloads []string, bad int) {
	var signals []parley.Notice
	for _, n := range ns {
		if n.Signal() {
			signals = append(signals, n)
		}
	}
	if len(signals) > 0 {
		committed := make([]parley.Notice, 0, len(ns)-len(signals))
		for _, n := range ns {
			if !n.Signal() {
				committed = append(committed, n)
			}
		}
		ns = committed
	}
	payloads, bad = encodeCommitted(lost, ns, max)
	more, badSignals := encodeSignals(signals, max)
	return append(payloads, more...), bad + badSignals
}

// encodeCommitted packs the notices of committed changes (encodeNotices).
func encodeCommitted(lost bool, ns []parley.Notice, max int) (payloads []string, bad int) {
	buf := make([]byte, 0, min(max, maxPayload)+1)
	start := func() {
		buf = append(buf[:0], payloadHeader...)
	}
	start()
	if lost {
		buf = append(buf, "\n"+lostLine...)
	}
	var line []byte
	for _, n := range ns {
		if !encodable(n) {
			bad++
			continue
		}
		carried := false
		if n.Event != nil && carriable(n) {
			line = appendCarried(append(line[:0], '\n'), n)
			carried = len(line)-1 <= maxCarriedLine
		}
		if !carried {
			line = appendNotice(append(line[:0], '\n'), n)
		}
		if len(buf)+len(line) > max && len(buf) > len(payloadHeader) {
			payloads = append(payloads, string(buf))
			start()
		}
		buf = append(buf, line...)
		if carried {
			copy(buf, carriedHeader)
		}
	}
	if len(buf) > len(payloadHeader) {
		payloads = append(payloads, string(buf))
	}
	return payloads, bad
}

func encodable(n parley.Notice) bool {
	if n.Account() {
		return n.Seq == 0 && n.Device == "" && parley.ValidUserID(n.User)
	}
	if !parley.ValidConvID(n.Conv) || n.Seq < 0 {
		return false
	}
	if n.User == "" {
		return n.Device == ""
	}
	return parley.ValidUserID(n.User) && (n.Device == "" || validDevice(n.Device))
}

func validDevice(s string) bool {
	c := utf8.RuneCountInString(s)
	return c >= 1 && c <= parley.MaxDeviceIDChars && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

func appendNotice(b []byte, n parley.Notice) []byte {
	if n.Account() {
		return append(append(b, '@'), n.User...)
	}
	b = append(b, n.Conv...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, n.Seq, 10)
	if n.User == "" {
		return b
	}
	b = append(b, ' ')
	b = append(b, n.User...)
	if n.Device == "" {
		return b
	}
	b = append(b, ' ')
	return appendEscaped(b, n.Device)
}

const hexDigits = "0123456789ABCDEF"

// appendEscaped appends s with '%', every byte up to ' ' and DEL as %XX.
func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c == '%' || c == 0x7f {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			b = append(b, c)
		}
	}
	return b
}

// carriable reports whether n's event (n encodable, n.Event set) can go in
// a '+' line: it is the event of (Conv, Seq) on an event notice, with none
// of the fields the format lacks, its body
// within MaxNoticeBody, its text fields within the format's bounds, its
// time a whole millisecond after 1970 (the format's precision, which is
// the stores').
func carriable(n parley.Notice) bool {
	ev := n.Event
	if n.Account() || n.Read() || n.Epoch <= 0 || ev.Conv != n.Conv || ev.Seq != n.Seq {
		return false
	}
	if len(ev.Body) > parley.MaxNoticeBody || !utf8.ValidString(ev.Body) || strings.IndexByte(ev.Body, 0) >= 0 {
		return false
	}
	if !shortText(ev.MID) || !shortText(string(ev.Kind)) || ev.Target < 0 {
		return false
	}
	if ev.Sender != "" && !parley.ValidUserID(ev.Sender) || ev.User != "" && !parley.ValidUserID(ev.User) {
		return false
	}
	if ev.Device != "" && !validDevice(ev.Device) {
		return false
	}
	// The format has no fields for a reply, mentions, attachments, a
	// reaction or derived state: such an event travels as ids, and each
	// gateway reads it (Feed) with all of them.
	if ev.ReplyTo != 0 || len(ev.Mentions) > 0 || len(ev.Attachments) > 0 || ev.Emoji != "" || ev.On || ev.Derived != nil {
		return false
	}
	return ev.At.UnixMilli() >= 0 && ev.At.Equal(time.UnixMilli(ev.At.UnixMilli()))
}

// shortText reports whether s is up to maxShortText characters of UTF-8
// without NUL.
func shortText(s string) bool {
	return utf8.RuneCountInString(s) <= maxShortText && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// appendCarried appends n (carriable) as a '+' line.
func appendCarried(b []byte, n parley.Notice) []byte {
	ev := n.Event
	b = append(b, carriedPrefix)
	b = append(b, n.Conv...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, n.Seq, 10)
	b = append(append(b, ' '), n.User...)
	b = strconv.AppendInt(append(b, ' '), n.Epoch, 10)
	b = strconv.AppendInt(append(b, ' '), ev.At.UnixMilli(), 10)
	b = appendEscaped(append(b, ' '), ev.MID)
	b = appendEscaped(append(b, ' '), string(ev.Kind))
	b = append(append(b, ' '), ev.Sender...)
	b = appendEscaped(append(b, ' '), ev.Device)
	b = strconv.AppendInt(append(b, ' '), ev.Target, 10)
	b = append(append(b, ' '), ev.User...)
	flags := 0
	if ev.Recalled {
		flags |= flagRecalled
	}
	escaped := len(ev.Body) + 2*(strings.Count(ev.Body, "%")+strings.Count(ev.Body, "\n"))
	if base64.RawStdEncoding.EncodedLen(len(ev.Body)) < escaped {
		flags |= flagBase64
	}
	b = strconv.AppendInt(append(b, ' '), int64(flags), 10)
	b = append(b, ' ')
	if flags&flagBase64 != 0 {
		return base64.RawStdEncoding.AppendEncode(b, []byte(ev.Body))
	}
	for i := 0; i < len(ev.Body); i++ {
		if c := ev.Body[i]; c == '%' || c == '\n' {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			b = append(b, c)
		}
	}
	return b
}

// encodeSignals packs signal notices into "s1" payloads of at most max
// bytes, skipping (and counting) those that are not ValidSignal.
func encodeSignals(ns []parley.Notice, max int) (payloads []string, bad int) {
	buf := []byte(signalHeader)
	var line []byte
	for _, n := range ns {
		if !n.ValidSignal() {
			bad++
			continue
		}
		line = append(line[:0], '\n')
		if n.Kind == parley.NoticeTyping {
			line = append(line, "t "...)
		} else {
			line = append(line, "p "...)
		}
		line = append(line, n.Conv...)
		line = append(append(line, ' '), n.User...)
		if n.Kind == parley.NoticePresence {
			line = append(append(line, ' '), n.State...)
		}
		line = strconv.AppendInt(append(line, ' '), n.At.UnixMilli(), 10)
		if len(buf)+len(line) > max && len(buf) > len(signalHeader) {
			payloads = append(payloads, string(buf))
			buf = append(buf[:0], signalHeader...)
		}
		buf = append(buf, line...)
	}
	if len(buf) > len(signalHeader) {
		payloads = append(payloads, string(buf))
	}
	return payloads, bad
}

// decodeSignals parses the lines of an "s1" payload.
func decodeSignals(rest string) ([]parley.Notice, error) {
	lines := strings.Split(rest, "\n")
	ns := make([]parley.Notice, 0, len(lines))
	for i, line := range lines {
		f := strings.Split(line, " ")
		var n parley.Notice
		switch {
		case len(f) == 4 && f[0] == "t":
			n = parley.Notice{Kind: parley.NoticeTyping, Conv: f[1], User: f[2]}
		case len(f) == 5 && f[0] == "p":
			n = parley.Notice{Kind: parley.NoticePresence, Conv: f[1], User: f[2], State: parley.PresenceState(f[3])}
		default:
			return nil, fmt.Errorf("line %d: not a signal", i+2)
		}
		ms, ok := parseSeq(f[len(f)-1])
		if !ok || ms > maxSignalMS {
			return nil, fmt.Errorf("line %d: bad time", i+2)
		}
		n.At = time.UnixMilli(ms).UTC()
		if !n.ValidSignal() {
			return nil, fmt.Errorf("line %d: invalid signal", i+2)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// maxSignalMS bounds a signal's time (the year 9999), so that every time
// read is one the encoder could have written.
const maxSignalMS = 253402300799999

// decodeNotices parses one payload.
func decodeNotices(p string) (ns []parley.Notice, lost bool, err error) {
	head, rest, more := strings.Cut(p, "\n")
	if head == signalHeader {
		if !more {
			return nil, false, errors.New("an s1 payload without signals")
		}
		ns, err := decodeSignals(rest)
		return ns, false, err
	}
	if head != payloadHeader && head != carriedHeader {
		return nil, false, errors.New("not a parley payload (no p1 or p2 header)")
	}
	if !more {
		return nil, false, nil
	}
	ns = make([]parley.Notice, 0, strings.Count(rest, "\n")+1)
	for i, line := range strings.Split(rest, "\n") {
		if line == lostLine {
			lost = true
			continue
		}
		var n parley.Notice
		if len(line) > 0 && line[0] == carriedPrefix {
			if head != carriedHeader {
				return nil, false, fmt.Errorf("line %d: a carried event in a p1 payload", i+2)
			}
			n, err = decodeCarried(line[1:])
		} else {
			n, err = decodeNotice(line)
		}
		if err != nil {
			return nil, false, fmt.Errorf("line %d: %w", i+2, err)
		}
		ns = append(ns, n)
	}
	return ns, lost, nil
}

func decodeNotice(line string) (parley.Notice, error) {
	var n parley.Notice
	if user, ok := strings.CutPrefix(line, "@"); ok {
		if !parley.ValidUserID(user) {
			return n, errors.New("bad account user")
		}
		return parley.AccountNotice(user), nil
	}
	f := strings.Split(line, " ")
	if len(f) < 2 || len(f) > 4 {
		return n, fmt.Errorf("%d fields, want 2 to 4", len(f))
	}
	if !parley.ValidConvID(f[0]) {
		return n, errors.New("bad conv")
	}
	n.Conv = f[0]
	seq, ok := parseSeq(f[1])
	if !ok {
		return n, errors.New("bad seq")
	}
	n.Seq = seq
	if len(f) >= 3 {
		if !parley.ValidUserID(f[2]) {
			return n, errors.New("bad user")
		}
		n.User = f[2]
	}
	if len(f) == 4 {
		d, ok := unescape(f[3])
		if !ok || !validDevice(d) {
			return n, errors.New("bad device")
		}
		n.Device = d
	}
	return n, nil
}

// decodeCarried parses a '+' line (without the '+').
func decodeCarried(line string) (parley.Notice, error) {
	var f [carriedFields]string
	for i := range carriedFields - 1 {
		var ok bool
		if f[i], line, ok = strings.Cut(line, " "); !ok {
			return parley.Notice{}, fmt.Errorf("%d fields, want %d", i+1, carriedFields)
		}
	}
	f[carriedFields-1] = line
	fail := func(what string) (parley.Notice, error) { return parley.Notice{}, errors.New("bad " + what) }
	n := parley.Notice{Conv: f[0], User: f[2]}
	ev := parley.Event{Sender: f[7], User: f[10]}
	var ok bool
	if n.Seq, ok = parseSeq(f[1]); !ok {
		return fail("seq")
	}
	if n.Epoch, ok = parseSeq(f[3]); !ok {
		return fail("epoch")
	}
	at, ok := parseSeq(f[4])
	if !ok {
		return fail("time")
	}
	ev.Conv, ev.Seq, ev.At = n.Conv, n.Seq, time.UnixMilli(at).UTC()
	if ev.MID, ok = unescape(f[5]); !ok {
		return fail("mid")
	}
	kind, ok := unescape(f[6])
	if !ok {
		return fail("kind")
	}
	ev.Kind = parley.EventKind(kind)
	if ev.Device, ok = unescape(f[8]); !ok {
		return fail("device")
	}
	if ev.Target, ok = parseSeq(f[9]); !ok {
		return fail("target")
	}
	flags := f[11]
	if len(flags) != 1 || flags[0] < '0' || flags[0] > '3' {
		return fail("flags")
	}
	ev.Recalled = (flags[0]-'0')&flagRecalled != 0
	if (flags[0]-'0')&flagBase64 != 0 {
		b, err := base64.RawStdEncoding.DecodeString(f[12])
		if err != nil {
			return fail("base64 body")
		}
		ev.Body = string(b)
	} else if ev.Body, ok = unescapeBody(f[12]); !ok {
		return fail("body")
	}
	n.Event = &ev
	// What the encoder would not send is refused: a receiver gets only
	// notices a publisher could have sent.
	if !encodable(n) || !carriable(n) {
		return parley.Notice{}, errors.New("invalid carried notice")
	}
	return n, nil
}

// unescapeBody undoes appendCarried's escaping of a body.
func unescapeBody(s string) (string, bool) {
	if strings.IndexByte(s, '%') < 0 {
		return s, true
	}
	return unpercent(s, false)
}

func parseSeq(s string) (int64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// unescape undoes appendNotice's escaping of a device; it rejects what
// appendNotice would have escaped but did not.
func unescape(s string) (string, bool) {
	if strings.IndexByte(s, '%') < 0 {
		return s, noEscapable(s)
	}
	return unpercent(s, true)
}

// unpercent decodes %XX escapes; strict also refuses a control byte or a
// space left unescaped (what a device's encoding always escapes).
func unpercent(s string, strict bool) (string, bool) {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '%':
			if i+2 >= len(s) {
				return "", false
			}
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if !ok1 || !ok2 {
				return "", false
			}
			b = append(b, hi<<4|lo)
			i += 2
		case strict && (c <= ' ' || c == 0x7f):
			return "", false
		default:
			b = append(b, c)
		}
	}
	return string(b), true
}

func noEscapable(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
