package nats

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/parleychat/parley"
)

// The message format, version 1: the byte 'N', the byte 1, then notices,
// each:
//
//	flags    byte: 1 = carries an event
//	Conv     string
//	Seq      varint
//	User     string
//	Device   string
//	if an event:
//	  Epoch varint; MID, Kind, Sender, Device, Body string; Target varint;
//	  User string; Recalled byte; At varint (Unix milliseconds)
//
// A string is a uvarint length and its bytes. A message that does not
// decode entirely is rejected whole.
const (
	magic         = 'N'
	version       = 1
	signalVersion = 2 // messages of signal notices (encoder.signals)
	flagEvent     = 1
	maxStrings    = 1 << 16 // no field of ours comes near it
)

// encoder packs notices into messages, reusing its buffer.
type encoder struct{ buf []byte }

// messages returns ns packed into messages of at most max bytes. A notice
// whose carried event would take it over max goes as ids only (a message
// over the server's max_payload would be refused, and the notice lost);
// one still larger gets a message of its own. The messages are fresh
// slices: the client may keep them.
func (e *encoder) messages(ns []parley.Notice, max int) [][]byte {
	var out [][]byte
	e.buf = append(e.buf[:0], magic, version)
	var one []byte
	for _, n := range ns {
		one = appendNotice(one[:0], n)
		if len(one)+2 > max && n.Event != nil {
			n.Event, n.Epoch = nil, 0
			one = appendNotice(one[:0], n)
		}
		if len(e.buf)+len(one) > max && len(e.buf) > 2 {
			out = append(out, append([]byte(nil), e.buf...))
			e.buf = append(e.buf[:0], magic, version)
		}
		e.buf = append(e.buf, one...)
	}
	if len(e.buf) > 2 {
		out = append(out, append([]byte(nil), e.buf...))
	}
	return out
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendNotice(b []byte, n parley.Notice) []byte {
	ev := n.Event
	if ev != nil {
		b = append(b, flagEvent)
	} else {
		b = append(b, 0)
	}
	b = appendString(b, n.Conv)
	b = binary.AppendVarint(b, n.Seq)
	b = appendString(b, n.User)
	b = appendString(b, n.Device)
	if ev == nil {
		return b
	}
	b = binary.AppendVarint(b, n.Epoch)
	b = appendString(b, ev.MID)
	b = appendString(b, string(ev.Kind))
	b = appendString(b, ev.Sender)
	b = appendString(b, ev.Device)
	b = appendString(b, ev.Body)
	b = binary.AppendVarint(b, ev.Target)
	b = appendString(b, ev.User)
	if ev.Recalled {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return binary.AppendVarint(b, ev.At.UnixMilli())
}

// decoder reads one message.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = errors.New(what)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, k := binary.Varint(d.b)
	if k <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[k:]
	return v
}

func (d *decoder) string() string {
	if d.err != nil {
		return ""
	}
	l, k := binary.Uvarint(d.b)
	if k <= 0 || l > maxStrings || uint64(len(d.b)-k) < l {
		d.fail("bad string")
		return ""
	}
	s := string(d.b[k : k+int(l)])
	d.b = d.b[k+int(l):]
	return s
}

// signals returns signal notices (ValidSignal) packed into messages of
// version 2, of at most max bytes each:
//
//	kind   byte: 1 = typing, 2 = presence
//	Conv   string
//	User   string
//	State  string (empty for typing)
//	At     varint (Unix milliseconds)
func (e *encoder) signals(ns []parley.Notice, max int) [][]byte {
	var out [][]byte
	e.buf = append(e.buf[:0], magic, signalVersion)
	var one []byte
	for _, n := range ns {
		one = append(one[:0], byte(n.Kind))
		one = appendString(one, n.Conv)
		one = appendString(one, n.User)
		one = appendString(one, string(n.State))
		one = binary.AppendVarint(one, n.At.UnixMilli())
		if len(e.buf)+len(one) > max && len(e.buf) > 2 {
			out = append(out, append([]byte(nil), e.buf...))
			e.buf = append(e.buf[:0], magic, signalVersion)
		}
		e.buf = append(e.buf, one...)
	}
	if len(e.buf) > 2 {
		out = append(out, append([]byte(nil), e.buf...))
	}
	return out
}

// decodeSignals parses the body of a version 2 message.
func decodeSignals(b []byte) ([]parley.Notice, error) {
	d := decoder{b: b}
	var ns []parley.Notice
	for len(d.b) > 0 && d.err == nil {
		n := parley.Notice{Kind: parley.NoticeKind(d.byte())}
		n.Conv, n.User, n.State = d.string(), d.string(), parley.PresenceState(d.string())
		ms := d.varint()
		if ms < 0 || ms > maxSignalMS {
			d.fail("bad time")
		}
		n.At = time.UnixMilli(ms).UTC()
		if d.err == nil && !n.ValidSignal() {
			d.fail("invalid signal")
		}
		ns = append(ns, n)
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(ns) == 0 {
		return nil, errors.New("a signal message without signals")
	}
	return ns, nil
}

// maxSignalMS bounds a signal's time (the year 9999).
const maxSignalMS = 253402300799999

// decode parses a message. Every notice must be one the publisher could
// have sent (encodable): a foreign or corrupt message is rejected whole.
func decode(msg []byte) ([]parley.Notice, error) {
	if len(msg) < 2 || msg[0] != magic {
		return nil, errors.New("not a parley message")
	}
	if msg[1] == signalVersion {
		return decodeSignals(msg[2:])
	}
	if msg[1] != version {
		return nil, fmt.Errorf("message version %d, want %d", msg[1], version)
	}
	d := decoder{b: msg[2:]}
	var ns []parley.Notice
	for len(d.b) > 0 && d.err == nil {
		flags := d.byte()
		n := parley.Notice{Conv: d.string(), Seq: d.varint(), User: d.string(), Device: d.string()}
		if flags&flagEvent != 0 {
			n.Epoch = d.varint()
			ev := &parley.Event{Conv: n.Conv, Seq: n.Seq}
			ev.MID = d.string()
			ev.Kind = parley.EventKind(d.string())
			ev.Sender = d.string()
			ev.Device = d.string()
			ev.Body = d.string()
			ev.Target = d.varint()
			ev.User = d.string()
			ev.Recalled = d.byte() == 1
			ev.At = time.UnixMilli(d.varint()).UTC()
			n.Event = ev
		} else if flags != 0 {
			d.fail("unknown flags")
		}
		if d.err == nil && !encodable(n) {
			d.fail("invalid notice")
		}
		ns = append(ns, n)
	}
	if d.err != nil {
		return nil, d.err
	}
	return ns, nil
}

// encodable reports whether n is a notice the bus carries: valid ids, a
// non-negative seq, a device only with a user, an event only on an event
// notice and about its (Conv, Seq).
func encodable(n parley.Notice) bool {
	if n.Kind != parley.NoticeCommitted {
		return n.ValidSignal()
	}
	if !n.At.IsZero() || n.State != "" {
		return false
	}
	if n.Account() {
		return n.Seq == 0 && n.Device == "" && n.Event == nil && parley.ValidUserID(n.User)
	}
	if !parley.ValidConvID(n.Conv) || n.Seq < 0 {
		return false
	}
	if n.Event != nil && (n.Read() || n.Event.Conv != n.Conv || n.Event.Seq != n.Seq || n.Epoch <= 0) {
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
