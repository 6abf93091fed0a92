package edge

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/xfertest"
)

// faultProxy stands between an edge and the origin binary and breaks the next n answers of the
// internal xorb route (n < 0: all of them) in one way: "drop" (the connection is cut half way),
// "short" (half the declared Content-Length, then the answer ends), "stall" (half, then nothing
// until the edge gives up) or "corrupt" (one byte in the middle flipped). Other routes pass.
type faultProxy struct {
	origin string
	mu     sync.Mutex
	mode   string
	n      int
	broken int // answers broken so far
}

func (p *faultProxy) set(mode string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.n, p.broken = mode, n, 0
}

// take returns the fault for the next xorb answer ("" for none).
func (p *faultProxy) take() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == "" || p.n == 0 {
		return ""
	}
	if p.n > 0 {
		p.n--
	}
	p.broken++
	return p.mode
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.origin+r.URL.RequestURI(), nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	mode := ""
	if strings.HasPrefix(r.URL.Path, "/internal/v1/xorbs/") && resp.StatusCode == http.StatusPartialContent {
		mode = p.take()
	}
	half := len(body) / 2
	switch mode {
	case "corrupt":
		body[half] ^= 0x20
	case "drop", "short", "stall":
		w.WriteHeader(resp.StatusCode)
		w.Write(body[:half])
		http.NewResponseController(w).Flush()
		switch mode {
		case "drop":
			panic(http.ErrAbortHandler)
		case "stall":
			select {
			case <-r.Context().Done():
			case <-time.After(30 * time.Second):
			}
		}
		return // short: fewer bytes than the Content-Length; the server closes the connection
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
}

// TestFillFaultsFromOrigin runs an edge against the origin binary through faultProxy: for each
// fault, an origin transfer that fails once is retried and the client gets the right bytes;
// one that fails on every attempt gives the client a clean error or a short body holding only
// verified bytes (never a corrupt one), leaves nothing in the data cache, is counted by reason,
// and the next request fills afresh.
func TestFillFaultsFromOrigin(t *testing.T) {
	const scope = "models/acme/fill-faults"
	o := startOrigin(t, t.TempDir())
	w, r := o.token(t, scope, "write"), o.token(t, scope, "read")
	fx := upload(t, o, w, 41, 1, 300) // one xorb, one ~1.3 MiB segment
	get := func(u string) (int, []byte) { return call(t, "GET", u, r, nil) }
	of := xfertest.Fetches(t, get, o.url, fx.hash)[0]
	st, want, _ := xfertest.BoundedGet(t, http.DefaultClient, of.URL, of.Range(), of.Len()+1)
	if st != http.StatusPartialContent || uint64(len(want)) != of.Len() {
		t.Fatalf("origin transfer: %d, %d bytes", st, len(want))
	}

	p := &faultProxy{origin: o.url}
	ps := httptest.NewServer(p)
	defer ps.Close()
	po := *o
	po.url = ps.URL
	cfg := filepath.Join(t.TempDir(), "edge.json")
	// No read-ahead: the faults are switched on after the reconstruction is answered, so a
	// read-ahead fill would meet a healthy origin (the fills it starts are ordinary fills).
	if err := os.WriteFile(cfg, []byte(`{"limits":{"origin_timeout":"1s"},"cache":{"read_ahead_bytes":-1}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{"drop": "short", "short": "short", "stall": "timeout", "corrupt": "corrupt"}
	for _, mode := range []string{"drop", "short", "stall", "corrupt"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			e := startEdge(t, &po, dir, "--config", cfg)
			ef := edgeFetches(t, e, r, fx.hash)[0]
			if ef.Start != of.Start || ef.End != of.End {
				t.Fatalf("edge range %s, origin range %s", ef.Range(), of.Range())
			}

			p.set(mode, 1)
			st, got, _ := xfertest.BoundedGet(t, insecureClient(), ef.URL, ef.Range(), ef.Len()+1)
			if st != http.StatusPartialContent || !bytes.Equal(got, want) {
				t.Fatalf("after one broken origin answer: %d, %d bytes (equal %v), want 206 with the %d bytes",
					st, len(got), bytes.Equal(got, want), len(want))
			}
			if v := e.metric(t, "xet_edge_datacache_fill_retries_total", "reason", reasons[mode]); v != 1 {
				t.Fatalf("fill_retries_total{reason=%s} %v, want 1", reasons[mode], v)
			}

			// A second edge, cold, against an origin that breaks every answer.
			dir2 := t.TempDir()
			e2 := startEdge(t, &po, dir2, "--config", cfg)
			ef2 := edgeFetches(t, e2, r, fx.hash)[0]
			p.set(mode, -1)
			got, err := fetchAll(insecureClient(), ef2)
			if err == nil && bytes.Equal(got, want) {
				t.Fatal("the client got the whole range although every origin answer was broken")
			}
			if !bytes.HasPrefix(want, got) {
				t.Fatalf("the client got %d bytes that differ from the xorb's (a corrupt byte was served)", len(got))
			}
			// Every fill has ended (failed: counted under the fault's reason).
			waitFor(t, "fills ended", func() bool {
				return e2.metric(t, "xet_edge_datacache_fills_in_flight") == 0
			})
			if v := e2.metric(t, "xet_edge_datacache_fill_failures_total", "reason", reasons[mode]); v < 1 {
				t.Fatalf("fill_failures_total{reason=%s} %v, want at least 1", reasons[mode], v)
			}
			// Nothing half-written: no temp file, and no segment file but whole segments with the
			// xorb's bytes (a chained origin answer cut part-way may still have delivered, and
			// verified, the segments before the cut; those are cached).
			for _, sub := range []string{"xorbs/tmp", "xorbs/segments"} {
				var files []string
				filepath.WalkDir(filepath.Join(dir2, sub), func(p string, d os.DirEntry, err error) error {
					if err == nil && !d.IsDir() {
						files = append(files, p)
					}
					return nil
				})
				for _, f := range files {
					if sub == "xorbs/segments" && wholeSegment(t, f, want, int64(of.Start)) {
						continue
					}
					t.Fatalf("a failed fill left %v", files)
				}
			}
			p.set("", 0)
			st, got, _ = xfertest.BoundedGet(t, insecureClient(), ef2.URL, ef2.Range(), ef2.Len()+1)
			if st != http.StatusPartialContent || !bytes.Equal(got, want) {
				t.Fatalf("after the origin recovered: %d, %d bytes", st, len(got))
			}
		})
	}
}

// fetchAll GETs f's signed range and returns what arrived: the body of a 206 (maybe short, with
// the read error) or an error for any other status.
func fetchAll(c *http.Client, f xfertest.Fetch) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", f.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Range", f.Range())
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusPartialContent {
		return nil, &statusError{resp.StatusCode}
	}
	return b, err
}

type statusError struct{ code int }

func (e *statusError) Error() string { return http.StatusText(e.code) }

// waitFor polls cond (bounded): a fill's end is counted just after its readers got its error.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestColdClientsShareOneOriginTransfer: 16 clients asking a cold edge for the same xorb range
// at once cause one origin transfer of its bytes (xet_edge_origin_xorb_bytes_total ≤ 1.05 ×
// the range), and all get the right bytes.
func TestColdClientsShareOneOriginTransfer(t *testing.T) {
	const scope = "models/acme/cold-collapse"
	o := startOrigin(t, t.TempDir())
	w, r := o.token(t, scope, "write"), o.token(t, scope, "read")
	fx := upload(t, o, w, 42, 1, 600) // one xorb of ~5 MiB: several segments
	get := func(u string) (int, []byte) { return call(t, "GET", u, r, nil) }
	of := xfertest.Fetches(t, get, o.url, fx.hash)[0]
	st, want, _ := xfertest.BoundedGet(t, http.DefaultClient, of.URL, of.Range(), of.Len()+1)
	if st != http.StatusPartialContent || uint64(len(want)) != of.Len() {
		t.Fatalf("origin transfer: %d, %d bytes", st, len(want))
	}
	e := startEdge(t, o, t.TempDir())
	ef := edgeFetches(t, e, r, fx.hash)[0]
	// The cold answer fetched its xorb's layout ahead of the transfer requests (server.readAhead).
	if v := e.metric(t, "xet_edge_metacache_layouts_warmed_total"); v != 1 {
		t.Fatalf("xet_edge_metacache_layouts_warmed_total = %v after a cold answer naming one xorb, want 1", v)
	}

	const clients = 16
	var wg sync.WaitGroup
	errs := make(chan string, clients)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := fetchAll(insecureClient(), ef)
			if err != nil || !bytes.Equal(got, want) {
				errs <- fmt.Sprintf("client got %d bytes, %v", len(got), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	origin := e.metric(t, "xet_edge_origin_xorb_bytes_total")
	if origin > 1.05*float64(len(want)) || origin < float64(len(want)) {
		t.Fatalf("%d clients: %v bytes from the origin for a %d-byte range, want one transfer (≤ 1.05×)", clients, origin, len(want))
	}
	t.Logf("%d clients, %d bytes each: %v bytes from the origin (%.3f×)", clients, len(want), origin, origin/float64(len(want)))
}

// wholeSegment reports whether the segment file at path (named <hash>.<start>.<len>) holds
// exactly the xorb's bytes at its offset; want holds the xorb's bytes from stored offset base.
func wholeSegment(t *testing.T, path string, want []byte, base int64) bool {
	t.Helper()
	parts := strings.Split(filepath.Base(path), ".")
	if len(parts) != 3 {
		return false
	}
	var start, n int64
	if _, err := fmt.Sscan(parts[1], &start); err != nil {
		return false
	}
	if _, err := fmt.Sscan(parts[2], &n); err != nil {
		return false
	}
	b, err := os.ReadFile(path)
	lo := start - base
	return err == nil && lo >= 0 && lo+n <= int64(len(want)) && int64(len(b)) == n && bytes.Equal(b, want[lo:lo+n])
}
