package originapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/internalapi"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

func layoutOf(data string) *xorb.Layout {
	b := xorb.NewBuilder(xorb.None)
	b.Add([]byte(data), hash.Chunk([]byte(data)))
	_, l := b.Finish()
	return l
}

// encodeLayouts writes the /internal/v1/layouts answer with the origin's encoder.
func encodeLayouts(t *testing.T, ls ...*xorb.Layout) []byte {
	t.Helper()
	want := make([]hash.Hash, len(ls))
	got := make(map[hash.Hash][]byte, len(ls))
	for i, l := range ls {
		b, err := l.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		want[i], got[l.Hash] = l.Hash, b
	}
	out, err := internalapi.AppendLayouts(nil, want, got)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fakeOrigin answers every request with its body and records the last request target.
type fakeOrigin struct {
	mu   sync.Mutex
	body []byte
	last string
}

func (o *fakeOrigin) set(b []byte) { o.mu.Lock(); o.body = b; o.mu.Unlock() }
func (o *fakeOrigin) target() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last
}

// serve starts o and returns a client of it.
func (o *fakeOrigin) serve(t *testing.T) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.last = r.URL.RequestURI()
		b := o.body
		o.mu.Unlock()
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	c, err := New(Options{BaseURL: srv.URL, Token: "t", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLayoutsAnswers: the client asks with the shared request target and decodes with the
// shared strict decoder; every malformed answer is ErrUnavailable, never a partial result.
func TestLayoutsAnswers(t *testing.T) {
	a, b, c := layoutOf("a"), layoutOf("b"), layoutOf("c")
	o := &fakeOrigin{}
	cl := o.serve(t)
	o.set(encodeLayouts(t, b, a))
	got, err := cl.Layouts(context.Background(), []hash.Hash{a.Hash, b.Hash, c.Hash})
	if err != nil || len(got) != 2 || got[a.Hash].Hash != a.Hash || got[b.Hash].Hash != b.Hash {
		t.Fatalf("good answer: %v %v", got, err)
	}
	if want := internalapi.LayoutsTarget([]hash.Hash{a.Hash, b.Hash, c.Hash}); o.target() != want {
		t.Fatalf("asked %s, want %s", o.target(), want)
	}
	good := encodeLayouts(t, a, b)
	misnamed := encodeLayouts(t, a)
	copy(misnamed[4:], b.Hash[:])
	one := encodeLayouts(t, a)[4:]
	repeated := append(binary.LittleEndian.AppendUint32(nil, 2), append(one, one...)...) // a's entry twice
	for name, in := range map[string][]byte{
		"empty":     nil,
		"truncated": good[:len(good)-1],
		"trailing":  append(append([]byte(nil), good...), 0),
		"too many":  encodeLayouts(t, a, b, c),
		"unasked":   encodeLayouts(t, c),
		"misnamed":  misnamed,
		"repeated":  repeated,
		"oversized": append(append([]byte(nil), good...), make([]byte, internalapi.MaxLayoutsAnswer(2))...),
	} {
		o.set(in)
		if got, err := cl.Layouts(context.Background(), []hash.Hash{a.Hash, b.Hash}); !errors.Is(err, ErrUnavailable) || got != nil {
			t.Errorf("%s: %v %v, want ErrUnavailable", name, got, err)
		}
	}
	if _, err := cl.Layouts(context.Background(), make([]hash.Hash, MaxLayoutsPerCall+1)); err == nil {
		t.Error("asked for more than MaxLayoutsPerCall")
	}
	if MaxLayoutsPerCall > internalapi.MaxLayoutsPerRequest {
		t.Error("MaxLayoutsPerCall is above what the origin accepts")
	}
}

// TestEventsAnswers: events decode with the shared strict decoder, and a malformed answer
// (here, a sequence number not after the one asked) is ErrUnavailable.
func TestEventsAnswers(t *testing.T) {
	f := hash.Chunk([]byte("f"))
	evs := []Event{{Seq: 8, Scope: "s", Files: []hash.Hash{f}, At: time.Unix(1e9, 0)}, {Seq: 9, Scope: "t", At: time.Unix(1e9, 5)}}
	enc, err := internalapi.AppendEvents(nil, evs)
	if err != nil {
		t.Fatal(err)
	}
	o := &fakeOrigin{body: enc}
	cl := o.serve(t)
	got, err := cl.Events(context.Background(), 7, 3*time.Second)
	if err != nil || len(got) != 2 || got[0].Files[0] != f || got[1].Files != nil || !got[1].At.Equal(evs[1].At) {
		t.Fatalf("events %+v %v", got, err)
	}
	if want := internalapi.EventsTarget(7, 3*time.Second); o.target() != want {
		t.Fatalf("asked %s, want %s", o.target(), want)
	}
	if got, err := cl.Events(context.Background(), 8, 0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("replayed event accepted: %+v %v", got, err)
	}
	o.set([]byte(`{"events":null}`))
	if got, err := cl.Events(context.Background(), 0, 0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("null events accepted: %+v %v", got, err)
	}
}

func TestErrorsAreClassified(t *testing.T) {
	// A refused connection is ErrUnavailable; a hung origin ErrTimeout; a 404 ErrNotFound;
	// a 500 ErrUnavailable.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + ln.Addr().String()
	ln.Close()
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			<-hang
		case "/internal/v1/jwks":
			w.WriteHeader(500)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	defer close(hang)
	for _, c := range []struct {
		name string
		base string
		call func(*Client) error
		want error
	}{
		{"refused", closedURL, func(c *Client) error { return c.Ping(context.Background()) }, ErrUnavailable},
		{"hung", srv.URL, func(c *Client) error { return c.Ping(context.Background()) }, ErrTimeout},
		{"404", srv.URL, func(c *Client) error { _, err := c.File(context.Background(), hash.Zero, "s"); return err }, ErrNotFound},
		{"500", srv.URL, func(c *Client) error { _, err := c.JWKS(context.Background()); return err }, ErrUnavailable},
	} {
		cl, err := New(Options{BaseURL: c.base, Token: "t", Timeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.call(cl); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// TestXorbTimeoutBoundsStallsNotTransfers: the client's timeout bounds each wait for more bytes
// of a xorb answer, not the whole answer: an answer that keeps coming for longer than the
// timeout is read whole (a chained fill's several segments over a slow path), while one that
// stops for longer than the timeout fails with ErrTimeout.
func TestXorbTimeoutBoundsStallsNotTransfers(t *testing.T) {
	const timeout = 300 * time.Millisecond
	const pieces = 10 // 10 × 60 ms: twice the timeout in all, never more than 60 ms without a byte
	body := bytes.Repeat([]byte("x"), pieces*1000)
	var stallAfter atomic.Int64 // pieces sent before the answer stops (0: never)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusPartialContent)
		for i := 0; i < pieces; i++ {
			if s := stallAfter.Load(); s > 0 && int64(i) == s {
				select {
				case <-r.Context().Done():
				case <-time.After(10 * time.Second):
				}
				return
			}
			w.Write(body[i*1000 : (i+1)*1000])
			http.NewResponseController(w).Flush()
			time.Sleep(60 * time.Millisecond)
		}
	}))
	defer srv.Close()
	c, err := New(Options{BaseURL: srv.URL, Token: "t", Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	var h hash.Hash
	read := func() ([]byte, error) {
		rc, err := c.FetchXorbRange(context.Background(), h, 0, int64(len(body)))
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	start := time.Now()
	got, err := read()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("a steady answer taking %v (timeout %v): %d bytes, %v; want all %d", time.Since(start), timeout, len(got), err, len(body))
	}
	stallAfter.Store(3)
	start = time.Now()
	_, err = read()
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("a stalled answer: %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the stall was noticed after %v (timeout %v)", d, timeout)
	}
}
