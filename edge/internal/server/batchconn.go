package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
)

// batchBytes is how much a batching connection gathers before one write to the socket: 16
// full TLS records. A TLS connection writes every record (at most 16 KiB of plaintext) with
// its own write(2); on loopback that is ~40% of the CPU of sending a 13 MB answer.
const batchBytes = 256 << 10

// copyBytes is the size of the buffer a batching handler may borrow to copy a body from a file
// (Batch.CopyBuf): one read(2) per batch instead of eight with net/http's 32 KiB buffer.
const copyBytes = batchBytes

// batchListener wraps the TCP connections it accepts (before TLS) in batchConns.
type batchListener struct {
	net.Listener
	bufs  *sync.Pool // of *[]byte of capacity batchBytes, lent to connections while they batch
	cbufs *sync.Pool // of *[]byte of length copyBytes, lent to handlers while they batch
}

func newBatchListener(l net.Listener) batchListener {
	return batchListener{Listener: l,
		bufs:  &sync.Pool{New: func() any { b := make([]byte, 0, batchBytes); return &b }},
		cbufs: &sync.Pool{New: func() any { b := make([]byte, copyBytes); return &b }}}
}

func (l batchListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &batchConn{Conn: c, bufs: l.bufs, cbufs: l.cbufs}, nil
}

// batchConn is a TCP connection under TLS that can gather the TLS records of one answer into
// writes of up to batchBytes. It passes writes through unless a handler turned batching on
// (beginBatch); the handler turns it off again (batch.end) before it returns, which writes what
// is gathered. The mutex orders the handler's writes with those TLS itself makes from the
// connection's reader (alerts, key updates), which all go through the same buffer in order.
type batchConn struct {
	net.Conn
	bufs  *sync.Pool
	cbufs *sync.Pool // nil: no copy buffers to lend
	mu    sync.Mutex
	buf   *[]byte // nil: not batching
	err   error   // the first failed write while batching
	cbuf  *[]byte // the copy buffer lent to the batching handler, if any
}

func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buf == nil {
		return c.Conn.Write(p)
	}
	if c.err != nil {
		return 0, c.err
	}
	b := *c.buf
	if len(b)+len(p) > cap(b) {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
		b = *c.buf
	}
	if len(p) >= cap(b) {
		return c.Conn.Write(p)
	}
	*c.buf = append(b, p...)
	return len(p), nil
}

func (c *batchConn) flushLocked() error {
	b := *c.buf
	if len(b) == 0 {
		return nil
	}
	_, err := c.Conn.Write(b)
	*c.buf = b[:0]
	if err != nil {
		c.err = err
	}
	return err
}

// flush writes what is gathered now (batching goes on); the first failed write's error.
func (c *batchConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buf == nil {
		return nil
	}
	if c.err != nil {
		return c.err
	}
	return c.flushLocked()
}

func (c *batchConn) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buf == nil {
		c.buf = c.bufs.Get().(*[]byte)
		c.err = nil
	}
}

// end writes what is gathered and stops batching.
func (c *batchConn) end() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buf == nil {
		return nil
	}
	err := c.err
	if err == nil {
		err = c.flushLocked()
	}
	*c.buf = (*c.buf)[:0]
	c.bufs.Put(c.buf)
	c.buf = nil
	if c.cbuf != nil {
		c.cbufs.Put(c.cbuf)
		c.cbuf = nil
	}
	return err
}

// copyBuf lends the batching handler a buffer of copyBytes until end (nil when the connection
// has none to lend or is not batching).
func (c *batchConn) copyBuf() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buf == nil || c.cbufs == nil {
		return nil
	}
	if c.cbuf == nil {
		c.cbuf = c.cbufs.Get().(*[]byte)
	}
	return *c.cbuf
}

type batchKey struct{}

// batchContext is the TLS server's ConnContext: it makes the connection's batchConn reachable
// from its requests.
func batchContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		if bc, ok := tc.NetConn().(*batchConn); ok {
			return context.WithValue(ctx, batchKey{}, bc)
		}
	}
	return ctx
}

// batch is one answer's batching (see beginBatch); the zero batch (not batching) is valid.
type batch struct {
	w  http.ResponseWriter
	bc *batchConn // nil: not batching
}

// beginBatch turns batching on for r's connection when r is HTTP/1.1 over a batchConn (an
// HTTP/1.1 handler is the only writer of its connection while it runs; HTTP/2 and HTTP/3
// write from their own goroutines and are left alone). Call it just before WriteHeader of a
// successful answer, and the batch's end before the handler returns: it flushes w through TLS
// (which would commit the status if none were written), ends the batch, and reports the first
// write error.
func beginBatch(w http.ResponseWriter, r *http.Request) batch {
	bc, ok := r.Context().Value(batchKey{}).(*batchConn)
	if !ok || r.ProtoMajor != 1 {
		return batch{}
	}
	bc.start()
	return batch{w: w, bc: bc}
}

// copyBuf is a buffer of copyBytes the handler may use until end; nil when not batching.
func (b batch) copyBuf() []byte {
	if b.bc == nil {
		return nil
	}
	return b.bc.copyBuf()
}

// end flushes the answer through TLS, ends the batch (returning the copy buffer) and reports
// the first write error.
func (b batch) end() error {
	if b.bc == nil {
		return nil
	}
	return errors.Join(flushHTTP(b.w), b.bc.end())
}

// flushHTTP writes what net/http holds of w's answer (headers, small writes) to the
// connection. It goes through http.ResponseController, which reaches the server's writer
// through the wrappers' Unwrap (httpserver.Recorder does not implement http.Flusher itself).
func flushHTTP(w http.ResponseWriter) error {
	err := http.NewResponseController(w).Flush()
	if errors.Is(err, http.ErrNotSupported) {
		return nil
	}
	return err
}
