package httpapi

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// serveLimited listens on a loopback port through lim and sends each connection it accepts to
// the channel; the listener is closed when the test ends.
func serveLimited(t *testing.T, lim *ConnLimiter) (net.Listener, <-chan net.Conn) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := lim.Listener(raw)
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	return raw, accepted
}

// TestConnLimiterHoldsAtCap: at the cap a new connection is not accepted (it waits in the
// backlog) until one closes; over the per-address cap it is closed at once.
func TestConnLimiterHoldsAtCap(t *testing.T) {
	lim := NewConnLimiter(2, 0)
	raw, accepted := serveLimited(t, lim)
	for range 3 {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first := <-accepted
	<-accepted
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted with a cap of 2")
	case <-time.After(300 * time.Millisecond):
	}
	if lim.Open() != 2 {
		t.Errorf("Open = %d, want 2", lim.Open())
	}
	first.Close()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting connection was not accepted after one closed")
	}
}

func TestConnLimiterPerIP(t *testing.T) {
	lim := NewConnLimiter(10, 1)
	var refused atomic.Int32
	lim.OnRefuse = func() { refused.Add(1) }
	raw, accepted := serveLimited(t, lim)
	a, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ca := <-accepted
	b, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := b.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("second connection from one address: read %v, want it closed", err)
	}
	if n := refused.Load(); n != 1 {
		t.Errorf("OnRefuse called %d times, want 1", n)
	}
	ca.Close()
	c, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case cc := <-accepted:
		cc.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("a connection after the first closed was not accepted")
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

// TestWriteProgressCutsStalledReaders serves a body larger than every buffer between server
// and client on HTTP/1.1, HTTP/2 and HTTP/3 (quic-go), to a client that reads nothing: the handler's write must
// fail soon after the progress deadline, while a client that reads gets the whole body even
// though it takes longer than the deadline in all (so the deadline is per write, not per
// answer).
func TestWriteProgressCutsStalledReaders(t *testing.T) {
	const d = 300 * time.Millisecond
	body := bytes.Repeat([]byte("x"), 64<<20)
	for _, proto := range []string{"h1", "h2", "h3"} {
		t.Run(proto, func(t *testing.T) {
			failed := make(chan time.Duration, 4)
			h := WriteProgress(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				start := time.Now()
				if r.URL.Path == "/slow" { // a reader slower than the deadline in all, never stalled
					for i := 0; i < 10; i++ {
						if _, err := w.Write(body[:1<<10]); err != nil {
							failed <- -1
							return
						}
						http.NewResponseController(w).Flush()
						time.Sleep(d / 3)
					}
					return
				}
				if _, err := w.Write(body); err != nil {
					failed <- time.Since(start)
				}
			}), d)
			srv := httptest.NewUnstartedServer(h)
			srv.EnableHTTP2 = proto == "h2"
			srv.StartTLS()
			defer srv.Close()
			c, base := srv.Client(), srv.URL
			if proto == "h3" { // quic-go's HTTP/3 server, with the test server's certificate
				pc, err := net.ListenPacket("udp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				h3 := &http3.Server{Handler: h, TLSConfig: http3.ConfigureTLSConfig(&tls.Config{
					Certificates: srv.TLS.Certificates, MinVersion: tls.VersionTLS13})}
				go h3.Serve(pc)
				defer h3.Close()
				tr := &http3.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
				defer tr.Close()
				c, base = &http.Client{Transport: tr}, "https://"+pc.LocalAddr().String()
			}
			resp, err := c.Get(base + "/stall")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if got := resp.ProtoMajor; got != map[string]int{"h1": 1, "h2": 2, "h3": 3}[proto] {
				t.Fatalf("protocol %d", got)
			}
			select {
			case took := <-failed:
				if took < d/2 {
					t.Errorf("write failed after %v, before the deadline %v", took, d)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the write to a client that reads nothing never failed")
			}
			resp2, err := c.Get(base + "/slow")
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp2.Body)
			resp2.Body.Close()
			if err != nil || len(b) != 10<<10 {
				t.Errorf("slow but steady answer: %d bytes, %v", len(b), err)
			}
			select {
			case <-failed:
				t.Error("a steady answer longer than the deadline failed")
			default:
			}
		})
	}
}

// TestWriteProgressKeepsSendfile: ReadFrom hands the connection pieces of the same file, so a
// file range still goes out whole and right.
func TestWriteProgressKeepsSendfile(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), (1<<20)/16+5)
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(WriteProgress(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		f.Seek(3, io.SeekStart)
		io.Copy(w, &io.LimitedReader{R: f, N: int64(len(data) - 10)})
	}), time.Second))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(b, data[3:len(data)-7]) {
		t.Fatalf("got %d bytes, want %d", len(b), len(data)-10)
	}
}
