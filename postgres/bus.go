package postgres

import (
	"context"
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
//     included, so a gateway hears its own notices back; receivers already
//     dedupe, so that is harmless, and it is what the contract asks
//     ("every gateway, this one included").
//   - When the listening connection fails, the listener reconnects with
//     exponential backoff and jitter (capped at 2s), LISTENs again, and
//     then calls Lost: notices sent meanwhile were missed. It does the same
//     after a first connection that needed retries.
//   - The listener never waits for the handler (a listener that stops
//     reading holds back the server's notification queue for everyone):
//     notices are buffered for a delivery goroutine, bounded like the
//     publish buffer, and an overflow becomes Lost.
//   - Payloads on the channel that do not parse (another program notifying
//     on it, a newer payload version) are logged and skipped.
//
// The bus needs a session-level connection: LISTEN does not work through a
// pooler in transaction mode.
type Bus struct {
	cfg  *pgx.ConnConfig
	opts BusOptions
	log  *slog.Logger

	out     queue // published, not yet sent
	in      queue // received, not yet delivered
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
	b.out.init(opts.MaxBuffered)
	b.in.init(opts.MaxBuffered)
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
		b.out.push(false, ns)
	}
}

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
	b.deliverLoop(ctx, h)
	wg.Wait()
	return ctx.Err()
}

// deliverLoop is the one goroutine that calls h.
func (b *Bus) deliverLoop(ctx context.Context, h parley.BusHandler) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.in.wake:
		}
		ns, lost := b.in.take()
		if lost {
			h.Lost()
		}
		if len(ns) > 0 {
			h.Notify(ns)
		}
	}
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
	b.out.signal() // connect now, not at the first publish
	for {
		select {
		case <-ctx.Done():
			if conn != nil && !conn.IsClosed() {
				// A gateway shutting down still tells the others what it
				// committed last, if it can do so quickly.
				ns, lost := b.out.take()
				if err := b.send(ctx, conn, lost, ns); err != nil {
					b.log.Warn("postgres: bus: last send before shutdown failed", "notices", len(ns), "err", err)
				}
			}
			return
		case <-b.out.wake:
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
				b.out.signal() // retry with what is buffered
				continue
			}
			b.publishPID.Store(conn.PgConn().PID())
			used = time.Now()
		}
		ns, lost := b.out.take()
		if err := b.send(ctx, conn, lost, ns); err != nil {
			failures++
			b.log.Warn("postgres: bus: send failed; notices dropped, loss announced on reconnect", "notices", len(ns), "err", err, "attempt", failures)
			b.out.push(true, nil)
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
			b.in.push(true, nil)
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
		if n != nil {
			ns, lost, derr := decodeNotices(n.Payload)
			if derr != nil {
				b.log.Warn("postgres: bus: skipped a payload that is not ours", "channel", n.Channel, "sender_pid", n.PID, "err", derr)
			} else {
				b.in.push(lost, ns)
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

// queue is a bounded buffer of notices between goroutines. Overflow drops
// everything buffered and remembers the loss: the loss is reported (Lost),
// and a resync supersedes the dropped notices anyway.
type queue struct {
	max  int
	wake chan struct{} // capacity 1: something to take

	mu   sync.Mutex
	ns   []parley.Notice
	lost bool
}

func (q *queue) init(max int) {
	q.max = max
	q.wake = make(chan struct{}, 1)
}

// push appends ns, and marks a loss if lost.
func (q *queue) push(lost bool, ns []parley.Notice) {
	q.mu.Lock()
	if len(q.ns)+len(ns) > q.max {
		q.ns, lost = nil, true
	} else {
		q.ns = append(q.ns, ns...)
	}
	q.lost = q.lost || lost
	q.mu.Unlock()
	q.signal()
}

func (q *queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take empties the queue.
func (q *queue) take() (ns []parley.Notice, lost bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ns, lost = q.ns, q.lost
	q.ns, q.lost = nil, false
	return ns, lost
}

// The payload format, version 1. A payload is lines separated by "\n":
//
//	p1                      header: the format and its version
//	!                       optional: the sender dropped notices before these
//	CONV SEQ                an event notice
//	CONV SEQ USER           an event notice naming a member
//	CONV SEQ USER DEVICE    a read-cursor notice
//	@USER                   an account notice
//
// Fields are separated by one space. CONV ([A-Za-z0-9._:-]{1,64}) and USER
// ([a-z0-9][a-z0-9._-]{0,31}) cannot contain a space or newline. SEQ is a
// non-negative decimal. DEVICE is any text (1–64 characters of UTF-8
// without NUL), so it is escaped: '%', every byte up to ' ' and DEL become
// %XX. A payload that does not parse entirely is rejected whole.
const (
	payloadHeader = "p1"
	lostLine      = "!"
	// maxPayload: PostgreSQL refuses payloads of 8000 bytes or more.
	maxPayload = 7999
)

// encodeNotices packs ns into as few payloads of at most max bytes as it
// can, the loss marker first if lost. It skips (and counts) notices that
// the format cannot carry: malformed ids, a negative seq, a device without
// a user.
func encodeNotices(lost bool, ns []parley.Notice, max int) (payloads []string, bad int) {
	var buf []byte
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
		line = appendNotice(append(line[:0], '\n'), n)
		if len(buf)+len(line) > max && len(buf) > len(payloadHeader) {
			payloads = append(payloads, string(buf))
			start()
		}
		buf = append(buf, line...)
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
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(n.Device); i++ {
		c := n.Device[i]
		if c <= ' ' || c == '%' || c == 0x7f {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return b
}

// decodeNotices parses one payload.
func decodeNotices(p string) (ns []parley.Notice, lost bool, err error) {
	head, rest, more := strings.Cut(p, "\n")
	if head != payloadHeader {
		return nil, false, errors.New("not a parley payload (no p1 header)")
	}
	if !more {
		return nil, false, nil
	}
	for i, line := range strings.Split(rest, "\n") {
		if line == lostLine {
			lost = true
			continue
		}
		n, err := decodeNotice(line)
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
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
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
		case c <= ' ' || c == 0x7f:
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
