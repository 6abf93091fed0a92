package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/xetcdn/xetcdn/shared/httprange"
)

// countConn records what is written to it; failAfter > 0 makes write number failAfter fail.
type countConn struct {
	net.Conn
	writes    atomic.Int64
	buf       bytes.Buffer
	failAfter int64
}

var errWriteFailed = errors.New("write failed")

func (c *countConn) Write(p []byte) (int, error) {
	if n := c.writes.Add(1); c.failAfter > 0 && n >= c.failAfter {
		return 0, errWriteFailed
	}
	return c.buf.Write(p)
}

func TestBatchConn(t *testing.T) {
	const rec = 16406 // a full TLS 1.3 AES-GCM record
	payload := make([]byte, 40*rec+1000)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	writeAll := func(c net.Conn) {
		t.Helper()
		for off := 0; off < len(payload); off += rec {
			if _, err := c.Write(payload[off:min(off+rec, len(payload))]); err != nil {
				t.Fatal(err)
			}
		}
	}
	l := newBatchListener(nil)

	cc := &countConn{}
	bc := &batchConn{Conn: cc, bufs: l.bufs}
	writeAll(bc)
	if got := cc.writes.Load(); got != 41 {
		t.Fatalf("not batching: %d writes, want 41 (passed through)", got)
	}

	cc = &countConn{}
	bc = &batchConn{Conn: cc, bufs: l.bufs}
	bc.start()
	writeAll(bc)
	if cc.buf.Len() >= len(payload) {
		t.Fatal("batching: everything written before end")
	}
	if err := bc.end(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cc.buf.Bytes(), payload) {
		t.Fatal("batching: bytes differ")
	}
	if got, max := cc.writes.Load(), int64(len(payload)/batchBytes+1); got > max {
		t.Fatalf("batching: %d writes, want at most %d", got, max)
	}
	n := cc.writes.Load()
	if _, err := bc.Write(payload[:10]); err != nil || cc.writes.Load() != n+1 {
		t.Fatalf("after end: write not passed through (%v)", err)
	}

	// A write larger than the buffer goes out at once, after what was gathered.
	cc = &countConn{}
	bc = &batchConn{Conn: cc, bufs: l.bufs}
	bc.start()
	big := bytes.Repeat([]byte{1}, batchBytes+1)
	if _, err := bc.Write([]byte("head")); err != nil {
		t.Fatal(err)
	}
	if _, err := bc.Write(big); err != nil {
		t.Fatal(err)
	}
	if err := bc.end(); err != nil {
		t.Fatal(err)
	}
	if want := append([]byte("head"), big...); !bytes.Equal(cc.buf.Bytes(), want) || cc.writes.Load() != 2 {
		t.Fatalf("large write: %d writes, equal %v", cc.writes.Load(), bytes.Equal(cc.buf.Bytes(), want))
	}

	// A failed flush fails the later writes of the batch and end.
	cc = &countConn{failAfter: 1}
	bc = &batchConn{Conn: cc, bufs: l.bufs}
	bc.start()
	var err error
	for off := 0; off < len(payload) && err == nil; off += rec {
		_, err = bc.Write(payload[off:min(off+rec, len(payload))])
	}
	if !errors.Is(err, errWriteFailed) {
		t.Fatalf("write after a failed flush: %v", err)
	}
	if err := bc.end(); !errors.Is(err, errWriteFailed) {
		t.Fatalf("end after a failed flush: %v", err)
	}
}

// countListener counts the writes of the connections it accepts, which it hands out on conns.
type countListener struct {
	net.Listener
	conns chan *writeCounter
}

type writeCounter struct {
	net.Conn
	writes atomic.Int64
}

func (c *writeCounter) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func (l countListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	wc := &writeCounter{Conn: c}
	l.conns <- wc
	return wc, nil
}

// TestReconOverBatchedTLS answers whole and ranged reconstructions over HTTP/1.1 + TLS through
// batching connections: the bytes are the fresh answers', and the socket sees a few large
// writes instead of one per TLS record (16 KiB).
func TestReconOverBatchedTLS(t *testing.T) {
	rec, layouts := worstFile(t, 50, 1024, 20000)
	fx := newReconFixture(t, rec, layouts, Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan *writeCounter, 1)
	srv := httptest.NewUnstartedServer(fx.srv.Handler())
	srv.Listener = newBatchListener(countListener{Listener: ln, conns: conns})
	srv.Config.ConnContext = batchContext
	srv.StartTLS()
	defer srv.Close()
	client := srv.Client()
	tr := client.Transport.(*http.Transport)
	tr.ForceAttemptHTTP2 = false
	tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	mid := httprange.Range{Kind: httprange.Closed, Start: rec.Size / 5, End: rec.Size / 2}
	var wc *writeCounter
	for i, tc := range []struct {
		hdr string
		rng *httprange.Range
	}{{"", nil}, {"", nil}, {fmt.Sprintf("bytes=%d-%d", mid.Start, mid.End), &mid}} {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/v2/reconstructions/"+rec.Hash.String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.hdr != "" {
			req.Header.Set("Range", tc.hdr)
		}
		var before int64
		if wc != nil {
			before = wc.writes.Load()
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || resp.ProtoMajor != 1 || resp.TLS == nil {
			t.Fatalf("request %d: %v, status %d, proto %s", i, err, resp.StatusCode, resp.Proto)
		}
		if want := fx.want(t, tc.rng); !bytes.Equal(body, want) {
			t.Fatalf("request %d: %d bytes differ from the fresh answer's %d", i, len(body), len(want))
		}
		if wc == nil {
			wc = <-conns // accepted during the first request; the client reuses it
			continue     // its writes include the handshake
		}
		records := int64(len(body)/(16<<10)) + 1
		if got := wc.writes.Load() - before; got > records/4+4 {
			t.Fatalf("request %d: %d socket writes for %d TLS records", i, got, records)
		}
	}
	select {
	case c := <-conns:
		t.Fatalf("the client opened a second connection (%v)", c.RemoteAddr())
	default:
	}
}
