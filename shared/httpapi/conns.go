package httpapi

import (
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds on clients that hold a server's resources without using them (docs/decisions.md,
// "Bounded waiting"): a cap on open connections, optionally per client IP, and a write
// progress deadline on every answer.

// ConnLimiter caps the open connections of one server across its listeners: at most Max in
// all, and at most PerIP from one client address (0: no per-address cap). Build it with
// NewConnLimiter; it is safe for concurrent use.
type ConnLimiter struct {
	mu    sync.Mutex
	cond  *sync.Cond // signalled when a slot frees or a listener closes
	open  int
	max   int
	perIP int
	byIP  map[string]int
	// OnRefuse, when set before use, is called for each connection refused for its address.
	OnRefuse func()
}

// NewConnLimiter caps connections at max (> 0) in all and perIP (0: off) per client address.
func NewConnLimiter(max, perIP int) *ConnLimiter {
	l := &ConnLimiter{max: max, perIP: perIP, byIP: map[string]int{}}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// Open reports how many connections hold a slot.
func (l *ConnLimiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// wait blocks until a slot is free (taking it when take) or closed reports true.
func (l *ConnLimiter) wait(closed *atomic.Bool, take bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.open >= l.max {
		if closed.Load() {
			return false
		}
		l.cond.Wait()
	}
	if closed.Load() {
		return false
	}
	if take {
		l.open++
	}
	return true
}

func (l *ConnLimiter) release() {
	l.mu.Lock()
	l.open--
	l.mu.Unlock()
	l.cond.Broadcast()
}

// takeIP counts a connection of ip, or reports false when ip is at its cap.
func (l *ConnLimiter) takeIP(ip string) bool {
	if l.perIP <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byIP[ip] >= l.perIP {
		return false
	}
	l.byIP[ip]++
	return true
}

func (l *ConnLimiter) releaseIP(ip string) {
	if l.perIP <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
}

// TryAcquire takes a slot for a connection from addr without waiting (for QUIC, whose
// connections cannot be left waiting in a backlog). The returned release is idempotent.
func (l *ConnLimiter) TryAcquire(addr net.Addr) (release func(), ok bool) {
	l.mu.Lock()
	if l.open >= l.max {
		l.mu.Unlock()
		return nil, false
	}
	l.open++
	l.mu.Unlock()
	ip := hostOf(addr)
	if !l.takeIP(ip) {
		l.release()
		if l.OnRefuse != nil {
			l.OnRefuse()
		}
		return nil, false
	}
	var once sync.Once
	return func() { once.Do(func() { l.releaseIP(ip); l.release() }) }, true
}

func hostOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.String()
	case *net.UDPAddr:
		return a.IP.String()
	}
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}

// Listener wraps ln so that it accepts a connection only while the limiter has a free slot:
// at the cap, new connections wait in the kernel's accept queue (first come, first served)
// until one closes, instead of being refused. (When another listener of the limiter takes the
// last slot between this one's wait and its accept, the accepted connection waits for the
// next slot before it is served: the cap is never exceeded.) A connection from an address at
// its per-address cap is accepted and closed at once. Closing a connection frees its slot.
func (l *ConnLimiter) Listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, l: l}
}

type limitListener struct {
	net.Listener
	l      *ConnLimiter
	closed atomic.Bool
}

func (ll *limitListener) Accept() (net.Conn, error) {
	for {
		if !ll.l.wait(&ll.closed, false) {
			return nil, net.ErrClosed
		}
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !ll.l.wait(&ll.closed, true) {
			_ = c.Close()
			return nil, net.ErrClosed
		}
		ip := hostOf(c.RemoteAddr())
		if !ll.l.takeIP(ip) {
			ll.l.release()
			if ll.l.OnRefuse != nil {
				ll.l.OnRefuse()
			}
			_ = c.Close()
			continue
		}
		limitUnsent(c)
		return &limitConn{Conn: c, release: func() { ll.l.releaseIP(ip); ll.l.release() }}, nil
	}
}

func (ll *limitListener) Close() error {
	ll.closed.Store(true)
	ll.l.mu.Lock() // a waiter is either before its check of closed or inside cond.Wait
	ll.l.cond.Broadcast()
	ll.l.mu.Unlock()
	return ll.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
	stalled atomic.Bool // a write hit its deadline: the peer stopped reading
}

// Close closes the connection and frees its slot. A connection whose peer stopped reading is
// reset instead of closed (SO_LINGER 0): a plain close would leave the unsent answer queued
// in the kernel, holding its memory, for as long as the peer keeps the connection open.
func (c *limitConn) Close() error {
	if c.stalled.Load() {
		if tc, ok := c.Conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

func (c *limitConn) noteErr(err error) {
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		c.stalled.Store(true)
	}
}

func (c *limitConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.noteErr(err)
	return n, err
}

// progressChunk is the most one write is given its deadline for: a client must take at
// least progressChunk bytes per ¾ of the progress deadline.
const progressChunk = 64 << 10

// WriteProgress makes every answer of h fail when writing it makes no progress for d: before
// each write of at most 64 KiB (longer writes and ReadFrom are split, keeping sendfile), the
// write deadline of the answer's stream is moved to d from now (re-armed at most every d/4,
// so a write gets between ¾d and d). Unlike http.Server.WriteTimeout it does not bound the
// whole answer: a large download on a slow link lives as long as it keeps moving, while a
// client that stops reading is cut off and its connection, goroutine and open files are
// freed. HTTP/1.1 sets the connection's deadline, HTTP/2 the stream's, HTTP/3 (quic-go) the
// stream's. d <= 0 returns h unchanged.
func WriteProgress(h http.Handler, d time.Duration) http.Handler {
	if d <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pw := &progressWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: d}
		pw.arm(true)       // the deadline of a previous answer on this connection is stale
		defer pw.arm(true) // what the server flushes after the handler returns
		h.ServeHTTP(pw, r)
	})
}

type progressWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	d    time.Duration
	next time.Time // when the deadline is due to be moved again
	off  bool      // the writer has no write deadline (a test recorder)
}

func (p *progressWriter) arm(force bool) {
	if p.off {
		return
	}
	now := time.Now()
	if !force && now.Before(p.next) {
		return
	}
	if err := p.rc.SetWriteDeadline(now.Add(p.d)); err != nil {
		p.off = errors.Is(err, http.ErrNotSupported)
		return
	}
	p.next = now.Add(p.d / 4)
}

func (p *progressWriter) WriteHeader(code int) {
	p.arm(false)
	p.ResponseWriter.WriteHeader(code)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	var n int
	for len(b) > 0 {
		c := b[:min(len(b), progressChunk)]
		p.arm(false)
		m, err := p.ResponseWriter.Write(c)
		n += m
		if err != nil {
			return n, err
		}
		b = b[m:]
	}
	return n, nil
}

// ReadFrom copies src in pieces of progressChunk, each with a fresh deadline. A src that is an
// *io.LimitedReader (an open file's range) is split into LimitedReaders of the same file, so
// the connection's sendfile path still applies.
func (p *progressWriter) ReadFrom(src io.Reader) (int64, error) {
	rf, ok := p.ResponseWriter.(io.ReaderFrom)
	if !ok {
		return io.CopyBuffer(struct{ io.Writer }{p}, src, make([]byte, progressChunk))
	}
	lr, isLimited := src.(*io.LimitedReader)
	var total int64
	for {
		var piece *io.LimitedReader
		if isLimited {
			if lr.N <= 0 {
				return total, nil
			}
			piece = &io.LimitedReader{R: lr.R, N: min(lr.N, progressChunk)}
		} else {
			piece = &io.LimitedReader{R: src, N: progressChunk}
		}
		want := piece.N
		p.arm(false)
		n, err := rf.ReadFrom(piece)
		total += n
		if isLimited {
			lr.N -= n
		}
		if err != nil || n < want {
			return total, err // n < want without an error: src ended
		}
	}
}

func (p *progressWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// ServerLimits are the timeouts and stream caps of a tier's http.Server.
type ServerLimits struct {
	// ReadHeaderTimeout bounds reading a request's header (slowloris).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection (HTTP/1.1) or one without open streams
	// (HTTP/2) after this long without a request.
	IdleTimeout time.Duration
	// WriteProgress is the write progress deadline (WriteProgress); on HTTP/2 it is also the
	// connection's WriteByteTimeout: a connection on which no byte can be written for this
	// long is closed, whichever of its streams is waiting.
	WriteProgress time.Duration
	// MaxStreams caps the concurrent streams of one HTTP/2 connection (and, so, its running
	// handlers: the rapid-reset defence of net/http counts reset streams whose handler still
	// runs against it). 0 means net/http's default (250).
	MaxStreams int
}

// NewServer is an http.Server for h with the limits lim, logging to errLog. It does not
// wrap h in WriteProgress (the caller does, so every listener of a tier shares one handler).
func NewServer(h http.Handler, lim ServerLimits, errLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		IdleTimeout:       lim.IdleTimeout,
		ErrorLog:          errLog,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: lim.MaxStreams,
			WriteByteTimeout:     lim.WriteProgress,
		},
	}
}

// ReadFrom keeps the connection's sendfile path (net/http uses it when the connection has it).
func (c *limitConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		n, err := rf.ReadFrom(r)
		c.noteErr(err)
		return n, err
	}
	return io.Copy(struct{ io.Writer }{c}, r)
}

// CloseWrite half-closes the connection, as net/http does before closing after an error.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
