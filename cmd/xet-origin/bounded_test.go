package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// maxXorbBody is the largest xorb body the origin accepts (ingest.MaxXorbBody): what an
// attacker declares to take the most from a budget charged by declared length.
const maxXorbBody = xorb.MaxRawBytes + xorb.HeaderSize*xorb.MaxChunks + 92 + 40*xorb.MaxChunks + 4

// withLimits makes o run with the given limits (merged over the defaults) from a config file.
// A config file o already has (production's) is extended, not replaced.
func withLimits(t *testing.T, o *proc, limits map[string]any) {
	t.Helper()
	cfg := map[string]any{}
	if i := slices.Index(o.args, "--config"); i >= 0 && i+1 < len(o.args) {
		b, err := os.ReadFile(o.args[i+1])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		o.args = slices.Delete(o.args, i, i+2)
	}
	cfg["limits"] = limits
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "limits.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	o.args = append(o.args, "--config", file)
}

// chunkStream is an endless run of valid uncompressed chunks of one xorb body (16 chunks of
// 64 KiB repeated): what a slow upload sends so that the origin, which validates a body on the
// local store as it arrives, keeps reading it.
type chunkStream struct {
	pat []byte
	off int
}

func newChunkStream() *chunkStream {
	pat := make([]byte, 0, 1<<20)
	for range 16 {
		payload := make([]byte, 64<<10-xorb.HeaderSize)
		for i := range payload {
			payload[i] = byte(mrand.IntN(256))
		}
		h := xorb.ChunkHeader{CompressedLen: uint32(len(payload)), RawLen: uint32(len(payload)), Scheme: xorb.None}
		pat = append(h.Append(pat), payload...)
	}
	return &chunkStream{pat: pat}
}

// next returns the next n bytes of the stream (n at most 1 MiB).
func (c *chunkStream) next(n int) []byte {
	out := make([]byte, 0, n)
	for len(out) < n {
		k := min(n-len(out), len(c.pat)-c.off)
		out = append(out, c.pat[c.off:c.off+k]...)
		c.off = (c.off + k) % len(c.pat)
	}
	return out
}

// slowUpload is an upload over a raw socket that declares declared bytes, sends burst of them
// at once, then trickles the rest at rate bytes/s (above the pace floor) until it is answered
// or stopped.
type slowUpload struct {
	conn    net.Conn
	started time.Time
	done    chan struct{}
	status  int
	header  http.Header
	body    string
	took    time.Duration
	err     error
}

func startSlowUpload(t *testing.T, o *proc, tok string, declared, burst int64, rate int) *slowUpload {
	t.Helper()
	c, err := net.Dial("tcp", o.addr)
	if err != nil {
		t.Fatal(err)
	}
	u := &slowUpload{conn: c, started: time.Now(), done: make(chan struct{})}
	t.Cleanup(func() { c.Close(); <-u.done })
	var x [32]byte
	for i := range x {
		x[i] = byte(mrand.IntN(256))
	}
	fmt.Fprintf(c, "POST /v1/xorbs/default/%x HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", x, o.addr, tok, declared)
	stop := make(chan struct{})
	go func() { // the writer: burst, then rate bytes/s in 4 steps a second
		junk := newChunkStream()
		for sent := int64(0); sent < burst; {
			n, err := c.Write(junk.next(int(min(1<<20, burst-sent))))
			sent += int64(n)
			if err != nil {
				return
			}
		}
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := c.Write(junk.next(rate / 4)); err != nil {
					return
				}
			}
		}
	}()
	go func() { // the reader: the answer, whenever it comes
		defer close(u.done)
		defer close(stop)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		u.took = time.Since(u.started)
		if err != nil {
			u.err = err
			return
		}
		var b strings.Builder
		bufio.NewReader(resp.Body).WriteTo(&b)
		resp.Body.Close()
		u.status, u.header, u.body = resp.StatusCode, resp.Header, b.String()
	}()
	return u
}

// postXorb uploads x with a client that gives up after limit; it returns the status (0 on a
// transport error) and how long it took.
func postXorb(o *proc, tok string, x xorbUp, limit time.Duration) (answer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", o.base()+x.path(), strings.NewReader(string(x.body)))
	req.Header.Set("Authorization", "Bearer "+tok)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{took: time.Since(start)}, err
	}
	defer resp.Body.Close()
	var b strings.Builder
	bufio.NewReader(resp.Body).WriteTo(&b)
	return answer{status: resp.StatusCode, header: resp.Header, body: []byte(b.String()), took: time.Since(start)}, nil
}

// TestSlowUploadsDoNotStallWriters is issue 9's attack 3 against the real binary: eight
// uploads each declare the largest xorb body and trickle 8 KB/s (twice the pace floor), which
// used to take the declared 64 MiB each from the ingest memory budget for as long as they
// lasted (hours) and queue every later upload behind them without end. Now memory is taken as
// bytes arrive: a small upload of another scope goes through in well under 5 s while they run,
// and each slow body is cut off (408) at the body deadline.
func TestSlowUploadsDoNotStallWriters(t *testing.T) {
	bin := buildBinary(t)
	o := newOrigin(t, bin)
	o.args = append(o.args, "--admin-listen", testenv.FreeAddr(t))
	const bodyDeadline = 8 * time.Second
	withLimits(t, o, map[string]any{"upload_body_timeout": bodyDeadline.String(), "ingest_wait": "2s"})
	o.start(t)
	attacker, victim := o.token(t, "models/evil/slow", "write"), o.token(t, "models/acme/small", "write")

	slow := make([]*slowUpload, 8)
	for i := range slow {
		slow[i] = startSlowUpload(t, o, attacker, maxXorbBody, 0, 8000)
	}
	time.Sleep(time.Second) // every slow upload is being read

	rng := mrand.New(mrand.NewPCG(9, 3))
	for i := range 3 {
		x := makeXorb(rng, 4)
		a, err := postXorb(o, victim, x, 5*time.Second)
		if err != nil || a.status != http.StatusOK {
			t.Fatalf("small upload %d of another scope while eight slow ones run: %v, status %d %s (after %v)",
				i, err, a.status, a.body, a.took.Round(time.Millisecond))
		}
		t.Logf("small upload %d: %v", i, a.took.Round(time.Millisecond))
	}

	for i, u := range slow {
		select {
		case <-u.done:
		case <-time.After(bodyDeadline + 15*time.Second):
			t.Fatalf("slow upload %d still open %v after it started (body deadline %v)", i, time.Since(u.started), bodyDeadline)
		}
		if u.err != nil || u.status != http.StatusRequestTimeout || !strings.Contains(u.body, "body_deadline") {
			t.Errorf("slow upload %d: %v, status %d %s; want 408 body_deadline", i, u.err, u.status, u.body)
		}
		if u.took < bodyDeadline-time.Second {
			t.Errorf("slow upload %d cut off after %v, before the body deadline %v", i, u.took, bodyDeadline)
		}
	}
	m := metrics(t, o)
	if !strings.Contains(m, `xet_origin_upload_rejections_total{reason="body_deadline"} 8`) {
		t.Errorf("metrics do not count 8 body_deadline rejections:\n%s", grepLines(m, "upload_rejections"))
	}
}

// TestUploadAdmissionIsBounded checks the two other bounds of upload admission on the real
// binary. On Postgres + MinIO, where a xorb's validated chunks are held in memory until it is
// stored: when ingest memory is really full (two uploads of scope A have sent 59 of 64 MiB
// each into a 128 MiB budget and trickle on), an upload of scope B waits at most ingest_wait and gets 503 +
// Retry-After instead of waiting for them. On the embedded backend, where a body is validated
// and written to the local store as it arrives, the two trickling uploads hold a fixed
// reservation each (xorb.StreamMemory), so scope B's upload goes through. On both, a third
// concurrent upload of scope A is 429 + Retry-After at once (uploads_per_scope 2), without
// affecting scope B.
func TestUploadAdmissionIsBounded(t *testing.T) {
	onEachBackend(t, testUploadAdmissionIsBounded)
}

func testUploadAdmissionIsBounded(t *testing.T, o *proc) {
	streamed := strings.HasSuffix(t.Name(), "/embedded")
	o.args = append(o.args, "--admin-listen", testenv.FreeAddr(t))
	withLimits(t, o, map[string]any{"ingest_memory": 128 << 20, "ingest_wait": "1s", "uploads_per_scope": 2})
	o.start(t)
	a, b := o.token(t, "models/acme/a", "write"), o.token(t, "models/acme/b", "write")
	rng := mrand.New(mrand.NewPCG(5, 7))

	// Scope A fills the memory with bytes actually sent. On S3 a body is held in memory
	// reserved 2 MiB at a time as it arrives (ingest/flat.go, spool.go): 59 MiB sent holds 30
	// such steps beside xorb.StreamMemory, so two such bodies leave less than one
	// StreamMemory of the 128 MiB free. The next step is needed only after another MiB, two
	// minutes away at the trickle's rate.
	var hogs []*slowUpload
	for range 2 {
		hogs = append(hogs, startSlowUpload(t, o, a, 64<<20, 59<<20, 8000))
	}
	time.Sleep(2 * time.Second) // both bursts are in

	// A third upload of scope A: over its scope's cap, at once.
	ans, err := postXorb(o, a, makeXorb(rng, 2), 5*time.Second)
	if err != nil || ans.status != http.StatusTooManyRequests || ans.header.Get("Retry-After") == "" {
		t.Errorf("third concurrent upload of scope A: %v, status %d %s (Retry-After %q); want 429 with Retry-After",
			err, ans.status, ans.body, ans.header.Get("Retry-After"))
	}
	ans, err = postXorb(o, b, makeXorb(rng, 2), 10*time.Second)
	if streamed {
		// Scope B: the streamed hogs hold little memory.
		if err != nil || ans.status != http.StatusOK {
			t.Errorf("upload of scope B while two streamed uploads trickle: %v, status %d %s; want 200", err, ans.status, ans.body)
		}
	} else if err != nil || ans.status != http.StatusServiceUnavailable || ans.header.Get("Retry-After") == "" {
		// Scope B: no memory free; the wait is bounded.
		t.Errorf("upload of scope B with ingest memory full: %v, status %d %s (Retry-After %q) after %v; want 503 with Retry-After",
			err, ans.status, ans.body, ans.header.Get("Retry-After"), ans.took)
	} else if ans.took > 4*time.Second {
		t.Errorf("upload of scope B was refused only after %v (ingest_wait 1s)", ans.took)
	}
	for i, h := range hogs {
		select {
		case <-h.done:
			t.Errorf("slow upload %d was answered while it trickled: %d %s", i, h.status, h.body)
		default:
		}
	}

	// Exactly one rejection of each kind so far. (Read before the hogs leave: the retries below
	// may meet a slot the server has not released yet, and count another rejection.)
	m := metrics(t, o)
	wants := []string{`reason="memory_wait"} 1`, `reason="scope_cap"} 1`}
	if streamed {
		wants[0] = `reason="memory_wait"} 0`
	}
	for _, want := range wants {
		if !strings.Contains(m, "xet_origin_upload_rejections_total{"+want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "upload_rejections"))
		}
	}

	// When the hogs are gone, both scopes upload again.
	for _, h := range hogs {
		h.conn.Close()
		<-h.done
	}
	for name, tok := range map[string]string{"A": a, "B": b} {
		if err := eventually(10*time.Second, func() error {
			ans, err := postXorb(o, tok, makeXorb(rng, 2), 5*time.Second)
			return statusIs(ans, err, http.StatusOK)
		}); err != nil {
			t.Errorf("upload of scope %s after the hogs left: %v", name, err)
		}
	}
}

// metrics reads the origin's /metrics from its admin listener (or "" without one).
func metrics(t *testing.T, o *proc) string {
	t.Helper()
	for i, a := range o.args {
		if a == "--admin-listen" && i+1 < len(o.args) {
			st, body := call(t, "GET", "http://"+o.args[i+1]+"/metrics", "", nil)
			if st != http.StatusOK {
				t.Fatalf("/metrics: %d", st)
			}
			return string(body)
		}
	}
	t.Fatal("origin has no admin listener")
	return ""
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestNonReadingDownloaders is issue 9's attack 5 against the origin binary: 500 clients ask
// for a signed transfer URL of a 8 MiB xorb and never read. Fresh downloads keep their latency
// while they hold on, and every stalled answer is cut off at the write progress deadline, so
// the origin's open fds fall back to where they were.
func TestNonReadingDownloaders(t *testing.T) {
	bin := buildBinary(t)
	o := newOrigin(t, bin)
	const attackers = 500
	const progress = 6 * time.Second
	withLimits(t, o, map[string]any{"write_progress": progress.String(), "idle_timeout": "5s"})
	p := o.start(t)
	w, r := o.token(t, "models/acme/stall", "write"), o.token(t, "models/acme/stall", "read")

	var chunks [][]byte
	for range 128 {
		raw := make([]byte, 64<<10)
		for i := range raw {
			raw[i] = byte(mrand.IntN(256))
		}
		chunks = append(chunks, raw)
	}
	f := makeFile(packXorb(xorb.None, chunks))
	uploadFile(t, o, w, f)
	st, body := call(t, "GET", o.base()+"/v1/reconstructions/"+f.hash.String(), r, nil)
	if st != 200 {
		t.Fatalf("reconstruction: %d %s", st, body)
	}
	var ans struct {
		FetchInfo map[string][]struct {
			URL      string                     `json:"url"`
			URLRange struct{ Start, End int64 } `json:"url_range"`
		} `json:"fetch_info"`
	}
	if err := json.Unmarshal(body, &ans); err != nil || len(ans.FetchInfo) != 1 {
		t.Fatalf("reconstruction %s: %v", body, err)
	}
	var url, rng string
	var size int64
	for _, fis := range ans.FetchInfo {
		url, size = fis[0].URL, fis[0].URLRange.End-fis[0].URLRange.Start+1
		rng = fmt.Sprintf("bytes=%d-%d", fis[0].URLRange.Start, fis[0].URLRange.End)
	}
	fresh := func() (time.Duration, error) {
		a, err := do("GET", url, "", nil, "Range", rng)
		if err == nil && (a.status != http.StatusPartialContent || int64(len(a.body)) != size) {
			err = fmt.Errorf("status %d, %d of %d bytes", a.status, len(a.body), size)
		}
		return a.took, err
	}
	if _, err := fresh(); err != nil {
		t.Fatalf("download before the attack: %v", err)
	}
	base := p.OpenFDs(t)

	path := url[strings.Index(url[len("http://"):], "/")+len("http://"):]
	start := time.Now()
	for range attackers {
		c, err := net.Dial("tcp", o.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if sc, ok := c.(*net.TCPConn); ok {
			sc.SetReadBuffer(4096)
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nRange: %s\r\n\r\n", path, o.addr, rng)
	}
	time.Sleep(500 * time.Millisecond)
	held := p.OpenFDs(t)
	t.Logf("%d non-readers connected in %v; origin fds %d → %d", attackers, time.Since(start).Round(time.Millisecond), base, held)
	if held < base+attackers*9/10 {
		t.Fatalf("origin holds %d fds with %d non-readers (from %d): the attack did not take", held, attackers, base)
	}
	var took []time.Duration
	for i := range 10 {
		d, err := fresh()
		if err != nil {
			t.Fatalf("fresh download %d during the attack: %v", i, err)
		}
		took = append(took, d)
	}
	slices.Sort(took)
	t.Logf("fresh downloads during the attack: median %v, max %v", took[len(took)/2].Round(time.Millisecond),
		took[len(took)-1].Round(time.Millisecond))
	if took[len(took)/2] > time.Second {
		t.Errorf("median fresh download took %v during the attack, want under 1 s", took[len(took)/2])
	}
	if err := eventually(progress+15*time.Second, func() error {
		if n := p.OpenFDs(t); n > base+20 {
			return fmt.Errorf("origin still holds %d fds (base %d) %v after %d non-readers connected (write progress %v)",
				n, base, time.Since(start).Round(time.Second), attackers, progress)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("origin fds back to base %v after the attack started", time.Since(start).Round(time.Millisecond))
}
