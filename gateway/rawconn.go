package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// The socket's TCP connection as the WebSocket library sees it. Two things
// are ours rather than the library's:
//
//   - Corked writes. The writer goroutine corks the connection, hands the
//     library every frame it has queued (each still one WebSocket message,
//     so one JSON frame per message as before), and uncorks: the bytes go
//     out in one write system call under one write deadline. Without it
//     every frame cost a write call, a context with a timer and the
//     library's deadline set-up and tear-down.
//   - Buffers only while in use. net/http's hijacked connection keeps a
//     4 KiB read buffer and a 4 KiB write buffer for the socket's whole
//     life; here the library gets small ones, and the batch buffer comes
//     from a pool when the writer corks and goes back when it uncorks, so
//     an idle socket holds none.
//
// Writes made while not corked (the library's pongs, pings and close
// frames, from other goroutines) go straight to the connection, in order
// with the corked bytes: both take mu.

const (
	// rawReadBuf and rawWriteBuf size the library's bufio buffers: the read
	// one holds a frame header and small requests (a larger payload is read
	// straight into the message), the write one a frame header.
	rawReadBuf  = 512
	rawWriteBuf = 128
	// corkFlush: a batch this large is written out before the writer
	// uncorks, so one batch never holds more than about this much.
	corkFlush = 64 << 10
)

// batchBufs pools the batch buffers of corked writers.
var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// corkConn is a hijacked connection whose writes can be corked.
type corkConn struct {
	net.Conn
	timeout time.Duration // the write deadline of one batch

	mu     sync.Mutex
	corked bool
	buf    *[]byte // the batch, from batchBufs; nil when empty
}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.corked {
		if c.buf != nil { // never, but keep the order if it were
			if err := c.flushLocked(); err != nil {
				return 0, err
			}
		}
		return c.Conn.Write(p)
	}
	if c.buf == nil {
		c.buf = batchBufs.Get().(*[]byte)
	}
	*c.buf = append(*c.buf, p...)
	if len(*c.buf) >= corkFlush {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// cork holds writes until uncork.
func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// uncork writes what was held, in one write under one deadline.
func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	return c.flushLocked()
}

func (c *corkConn) flushLocked() error {
	if c.buf == nil {
		return nil
	}
	b := c.buf
	c.buf = nil
	var err error
	if len(*b) > 0 {
		if err = c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err == nil {
			_, err = c.Conn.Write(*b)
			if e := c.Conn.SetWriteDeadline(time.Time{}); err == nil {
				err = e
			}
		}
	}
	if cap(*b) <= 4*corkFlush { // a rare huge frame's buffer is not kept
		*b = (*b)[:0]
		batchBufs.Put(b)
	}
	return err
}

// hijackWriter hands websocket.Accept a corkConn and small buffers instead
// of net/http's connection and buffers; raw is set once Accept hijacked.
type hijackWriter struct {
	http.ResponseWriter
	timeout time.Duration
	raw     *corkConn
}

func (w *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	cc := &corkConn{Conn: nc, timeout: w.timeout}
	// Bytes the client sent right behind its upgrade request may sit in
	// net/http's buffer: they move to ours, buffered, where the library
	// looks for them.
	n := brw.Reader.Buffered()
	var left []byte
	if n > 0 {
		b, _ := brw.Reader.Peek(n)
		left = bytes.Clone(b)
	}
	br := bufio.NewReaderSize(cc, max(rawReadBuf, n))
	if n > 0 {
		br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(left), cc), max(rawReadBuf, n))
		if _, err := br.Peek(n); err != nil {
			nc.Close()
			return nil, nil, err
		}
	}
	w.raw = cc
	return cc, bufio.NewReadWriter(br, bufio.NewWriterSize(cc, rawWriteBuf)), nil
}
