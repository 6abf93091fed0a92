package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/xetcdn/xetcdn/shared/httpapi"
)

// Upload admission (docs/decisions.md, "Bounded waiting"). An upload body is held in memory
// until the upload is stored, so the origin bounds three things, none of them by what the
// client declares:
//
//   - memory: the bytes of buffer actually allocated for bodies, reserved as the body grows
//     (never its Content-Length up front), from one budget (limits.ingest_memory). A reservation
//     waits at most limits.ingest_wait: past it the upload is 503 + Retry-After, so a few slow
//     bodies can never make every other writer queue without end;
//   - concurrency per scope: at most limits.uploads_per_scope uploads of one scope are being
//     read or stored at once; one more is 429 + Retry-After;
//   - time: a body must be complete within limits.upload_body_timeout of its first byte being
//     awaited (408), on top of the pace floor, which only catches bodies below it.

// ErrIngestBusy is a reservation of ingest memory that did not come in time (503).
var ErrIngestBusy = fmt.Errorf("%w: upload memory is busy", httpapi.ErrUnavailable)

// ErrScopeBusy is an upload over its scope's concurrency cap (429).
var ErrScopeBusy = errors.New("too many concurrent uploads for this scope")

// ErrBodyDeadline is an upload body not complete within the body deadline (408).
var ErrBodyDeadline = fmt.Errorf("%w: upload body not complete in time", httpapi.ErrTimeout)

// Reasons an upload is refused, the label values of xet_origin_upload_rejections_total.
const (
	rejectMemory   = "memory_wait"
	rejectScope    = "scope_cap"
	rejectDeadline = "body_deadline"
	rejectPace     = "pace_floor"
)

// minGrow is the first reservation of a body, and the least it grows by.
const minGrow = 256 << 10

// scopeSlots counts the uploads in flight per scope.
type scopeSlots struct {
	mu  sync.Mutex
	max int
	n   map[string]int
}

func newScopeSlots(max int) *scopeSlots { return &scopeSlots{max: max, n: map[string]int{}} }

// take takes a slot of scope, or reports false when the scope has max in flight.
func (s *scopeSlots) take(scope string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[scope] >= s.max {
		return false
	}
	s.n[scope]++
	return true
}

func (s *scopeSlots) release(scope string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[scope]--; s.n[scope] <= 0 {
		delete(s.n, scope)
	}
}

// bodyReader reads one upload body into memory reserved from the ingest budget as it grows.
type bodyReader struct {
	s        *Server
	mem      *semaphore.Weighted
	wait     time.Duration
	reserved int64 // bytes reserved from mem (the capacity of buf)
}

// reserve grows the reservation by n, waiting at most b.wait.
func (b *bodyReader) reserve(ctx context.Context, n int64) error {
	// Free memory and no one waiting (TryAcquire keeps the waiters' order): no timer to arm.
	if b.mem.TryAcquire(n) {
		b.s.m.ingestWait.Observe(0)
		b.reserved += n
		return nil
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, b.wait)
	defer cancel()
	if err := b.mem.Acquire(ctx, n); err != nil {
		if parent := context.Cause(ctx); parent != context.DeadlineExceeded {
			return parent // the request itself ended
		}
		b.s.m.uploadRejected.WithLabelValues(rejectMemory).Inc()
		return fmt.Errorf("%w: no %d bytes free within %v", ErrIngestBusy, n, b.wait)
	}
	b.s.m.ingestWait.Observe(time.Since(start).Seconds())
	b.reserved += n
	return nil
}

func (b *bodyReader) release() {
	if b.reserved > 0 {
		b.mem.Release(b.reserved)
		b.reserved = 0
	}
}

// clampedDeadline sets read deadlines no later than end, whatever the pace reader asks for.
// The zero time (the body ended) is passed on: a deadline left on the connection would fire
// in net/http's background read while the upload is stored, and cancel the request.
type clampedDeadline struct {
	rc  *http.ResponseController
	end time.Time
}

func (c clampedDeadline) SetReadDeadline(t time.Time) error {
	if !t.IsZero() && t.After(c.end) {
		t = c.end
	}
	return c.rc.SetReadDeadline(t)
}

// paced returns r's body (at most limit bytes) read under the pace floor, and the body deadline
// its reads are held to (limits.upload_body_timeout from now).
func (b *bodyReader) paced(w http.ResponseWriter, r *http.Request, limit int64) (io.Reader, time.Time) {
	end := time.Now().Add(b.s.cfg.Limits.UploadBodyTimeout.D())
	rc := http.NewResponseController(w)
	return httpapi.NewPaceReader(http.MaxBytesReader(w, r.Body, limit), clampedDeadline{rc, end},
		httpapi.PaceOptions{Floor: b.s.cfg.Limits.PaceFloor, Window: b.s.cfg.Limits.PaceWindow.D()}), end
}

// read reads the body of r (at most limit bytes), paced, within the body deadline, into a
// buffer whose every byte of capacity is reserved. On error nothing stays reserved.
func (b *bodyReader) read(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", httpapi.ErrTooLarge, r.ContentLength, limit)
	}
	pr, end := b.paced(w, r, limit)
	// The most the body can be: its declared length (a longer body fails on the connection),
	// else limit. Capacity grows geometrically up to it, each step reserved before it is made:
	// doubling when the length is unknown (the reservation never exceeds twice what arrived),
	// quadrupling when it is declared (capped at it, so it never exceeds the body either). Each
	// step copies what arrived so far into fresh memory; doubling to a 35 MB xorb copied 64 MB
	// and was the largest CPU cost of a small-file upload with hf_xet (issue 13).
	most, factor := limit, int64(1)
	if r.ContentLength >= 0 {
		most, factor = r.ContentLength, 3
	}
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) >= most {
				// Full at the declared length: read one more byte to see the end (or an
				// overlong body, which http refuses anyway).
				var one [1]byte
				n, err := pr.Read(one[:])
				if n > 0 {
					return nil, fmt.Errorf("%w: body longer than its Content-Length", httpapi.ErrBadRequest)
				}
				if err == io.EOF {
					return buf, nil
				}
				if err == nil {
					continue
				}
				return nil, b.bodyErr(err, end, len(buf), limit)
			}
			grow := min(max(factor*int64(cap(buf)), minGrow), most-int64(cap(buf)))
			if err := b.reserve(r.Context(), grow); err != nil {
				return nil, err
			}
			nb := make([]byte, len(buf), int64(cap(buf))+grow)
			copy(nb, buf)
			buf = nb
		}
		n, err := pr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, b.bodyErr(err, end, len(buf), limit)
		}
		if n == 0 && time.Now().After(end) {
			return nil, b.bodyErr(os.ErrDeadlineExceeded, end, len(buf), limit)
		}
	}
}

// bodyErr classifies a failed body read: past the body deadline, under the pace floor, over
// the limit, or cut off.
func (b *bodyReader) bodyErr(err error, end time.Time, got int, limit int64) error {
	var mb *http.MaxBytesError
	switch {
	case !time.Now().Before(end) && (errors.Is(err, httpapi.ErrTimeout) || errors.Is(err, os.ErrDeadlineExceeded)):
		b.s.m.uploadRejected.WithLabelValues(rejectDeadline).Inc()
		return fmt.Errorf("%w: %d bytes in %v", ErrBodyDeadline, got, b.s.cfg.Limits.UploadBodyTimeout.D())
	case errors.Is(err, httpapi.ErrTimeout):
		b.s.m.uploadRejected.WithLabelValues(rejectPace).Inc()
		return err
	case errors.As(err, &mb):
		return fmt.Errorf("%w: over %d bytes", httpapi.ErrTooLarge, limit)
	case errors.Is(err, context.Canceled):
		return err
	}
	return fmt.Errorf("%w: body truncated after %d bytes: %v", httpapi.ErrBadRequest, got, err)
}

// retryAfterScope is the Retry-After of a 429 for the scope cap: uploads of the scope finish
// and free their slot within seconds normally.
const retryAfterScope = 2 * time.Second

// admitUpload takes a slot of the request's scope (429 + Retry-After when there is none).
func (s *Server) admitUpload(w http.ResponseWriter, r *http.Request) (release func(), err error) {
	scope := ""
	if c := claims(r.Context()); c != nil {
		scope = c.Scope
	}
	if !s.scopes.take(scope) {
		s.m.uploadRejected.WithLabelValues(rejectScope).Inc()
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfterScope/time.Second)))
		return nil, fmt.Errorf("%w: %d in flight", ErrScopeBusy, s.scopes.max)
	}
	return func() { s.scopes.release(scope) }, nil
}
