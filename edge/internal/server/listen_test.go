package server

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/xetcdn/xetcdn/shared/httpapi"
)

// TestQUICConnectionCap: the connection cap holds for HTTP/3 too. With a cap of one and one
// QUIC connection open, a second is closed (the client gets an error); once the first ends,
// a new one is served.
func TestQUICConnectionCap(t *testing.T) {
	certSrv := httptest.NewUnstartedServer(nil)
	certSrv.StartTLS()
	cert := certSrv.TLS.Certificates[0]
	certSrv.Close()
	l, err := Listen("127.0.0.1:0", "", "")
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	conns := ConnLimits{Limiter: httpapi.NewConnLimiter(1, 0), ServerLimits: httpapi.ServerLimits{
		ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second, WriteProgress: 5 * time.Second, MaxStreams: 10}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, slog.New(slog.DiscardHandler), l, cert, ok, ok, time.Second, conns) }()
	defer func() { cancel(); <-done }()
	url := "https://" + l.TLS.Addr().String() + "/"
	client := func() (*http.Client, *http3.Transport) {
		tr := &http3.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
		return &http.Client{Transport: tr, Timeout: 5 * time.Second}, tr
	}
	get := func(c *http.Client) error {
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	first, tr1 := client()
	if err := get(first); err != nil {
		t.Fatalf("first HTTP/3 connection: %v", err)
	}
	second, tr2 := client()
	defer tr2.Close()
	if err := get(second); err == nil {
		t.Fatal("a second HTTP/3 connection was served with a cap of one")
	}
	tr1.Close() // the first connection ends; its slot frees when the server sees it gone
	third, tr3 := client()
	defer tr3.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := get(third)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no HTTP/3 connection served after the first closed: %v", err)
		}
		tr3.Close()
		third, tr3 = client()
		time.Sleep(100 * time.Millisecond)
	}
}
