package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// Defaults of the pace floor.
const (
	DefaultPaceFloor  = 4 << 10 // bytes per second
	DefaultPaceWindow = 10 * time.Second
)

// Deadliner sets the read deadline of the connection a body arrives on;
// *http.ResponseController implements it.
type Deadliner interface {
	SetReadDeadline(time.Time) error
}

// PaceOptions configure a pace floor: in every consecutive Window since the first read, at least
// Floor×Window bytes must arrive, or the body fails with ErrTimeout. Zero values mean the
// defaults; a negative Floor disables the floor.
type PaceOptions struct {
	Floor  int64 // bytes per second
	Window time.Duration
	Now    func() time.Time // clock; nil = time.Now
}

// PaceReader enforces a pace floor on a request body. A client that stalls is cut off by the
// connection's read deadline, which the reader keeps at the end of the first window whose
// quota is not yet met; a client that trickles is cut off at the end of a window it fell short
// in. Either way Read returns an error wrapping ErrTimeout. Not safe for concurrent use.
type PaceReader struct {
	r        io.Reader
	dl       Deadliner
	now      func() time.Time
	window   time.Duration
	quota    int64
	started  bool
	winEnd   time.Time // end of the current window
	winBytes int64     // bytes received in the current window
	deadline time.Time // deadline last set on dl
}

// NewPaceReader wraps r. dl may be nil (no stall detection, only trickle detection).
func NewPaceReader(r io.Reader, dl Deadliner, o PaceOptions) *PaceReader {
	if o.Floor == 0 {
		o.Floor = DefaultPaceFloor
	}
	if o.Window <= 0 {
		o.Window = DefaultPaceWindow
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	p := &PaceReader{r: r, dl: dl, now: o.Now, window: o.Window}
	if o.Floor > 0 {
		p.quota = int64(float64(o.Floor) * o.Window.Seconds())
	}
	return p
}

// Read implements io.Reader.
func (p *PaceReader) Read(b []byte) (int, error) {
	if p.quota <= 0 {
		return p.r.Read(b)
	}
	now := p.now()
	if !p.started {
		p.started, p.winEnd = true, now.Add(p.window)
	}
	if err := p.advance(now); err != nil {
		return 0, err
	}
	p.setDeadline()
	n, err := p.r.Read(b)
	p.winBytes += int64(n)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return n, fmt.Errorf("%w: fewer than %d bytes in %v", ErrTimeout, p.quota, p.window)
		}
		if err == io.EOF && p.dl != nil {
			_ = p.dl.SetReadDeadline(time.Time{})
		}
		return n, err
	}
	if err := p.advance(p.now()); err != nil {
		return n, err
	}
	return n, nil
}

// advance closes every window that ended before now, failing if one fell short.
func (p *PaceReader) advance(now time.Time) error {
	for !now.Before(p.winEnd) {
		if p.winBytes < p.quota {
			return fmt.Errorf("%w: %d bytes in %v, floor %d", ErrTimeout, p.winBytes, p.window, p.quota)
		}
		p.winBytes = 0
		p.winEnd = p.winEnd.Add(p.window)
	}
	return nil
}

func (p *PaceReader) setDeadline() {
	if p.dl == nil {
		return
	}
	d := p.winEnd
	if p.winBytes >= p.quota {
		d = d.Add(p.window) // this window is satisfied; the next one is the one at risk
	}
	if !d.Equal(p.deadline) {
		p.deadline = d
		_ = p.dl.SetReadDeadline(d) // unsupported (HTTP/2 test recorders): trickle detection remains
	}
}

// BodyOptions configure ReadBody.
type BodyOptions struct {
	Limit int64 // maximum body length; more → ErrTooLarge
	Pace  PaceOptions
}

// ReadBody reads the whole request body, bounded by o.Limit (413 when over it, checked against
// Content-Length before reading anything) and paced (408 when too slow). A body that ends
// before its Content-Length is ErrBadRequest. The returned slice is exactly the body.
func ReadBody(w http.ResponseWriter, r *http.Request, o BodyOptions) ([]byte, error) {
	if r.ContentLength > o.Limit {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, r.ContentLength, o.Limit)
	}
	body := http.MaxBytesReader(w, r.Body, o.Limit)
	pr := NewPaceReader(body, http.NewResponseController(w), o.Pace)
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + bytes.MinRead) // bounded by o.Limit above
	}
	_, err := buf.ReadFrom(pr)
	var mb *http.MaxBytesError
	switch {
	case err == nil:
		return buf.Bytes(), nil
	case errors.As(err, &mb):
		return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, o.Limit)
	case errors.Is(err, ErrTimeout):
		return nil, err
	}
	// io.ErrUnexpectedEOF (shorter than Content-Length), a reset connection, bad chunking: the
	// client's fault either way.
	return nil, fmt.Errorf("%w: body truncated after %d bytes: %v", ErrBadRequest, buf.Len(), err)
}
