package server

import (
	"bytes"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/config"
	"github.com/xetcdn/xetcdn/origin/internal/ingest"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// localTempFiles lists the temporary ".put-*" files in e's local object store.
func localTempFiles(t *testing.T, e *env) []string {
	t.Helper()
	var out []string
	if err := e.objs.(*objstore.Local).TempFiles(t.Context(), func(p string, _ fs.FileInfo) error { out = append(out, p); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestXorbStreamFixedMemory: on the local store an upload holds xorb.StreamMemory of ingest
// memory, not its body: with a budget of two such reservations, an 8 MiB xorb is stored (a
// body buffered in memory could not reserve its 8 MiB and was refused with 503), and two
// uploads that trickle on hold no more than their reservations, so a third, of another scope,
// waits at most ingest_wait and gets 503 + Retry-After.
func TestXorbStreamFixedMemory(t *testing.T) {
	e := newEnv(t, sqliteLocal(), func(c *config.Config) {
		c.Limits.IngestMemory = 2 * xorb.StreamMemory
		c.Limits.IngestWait = config.Duration(300 * time.Millisecond)
	})
	f := makeFixture(t, 31, 1, 128, 120<<10)
	if len(f.xorbs[0]) < 3*xorb.StreamMemory {
		t.Fatalf("fixture of %d bytes is not larger than the budget", len(f.xorbs[0]))
	}
	path := "/v1/xorbs/default/" + f.layouts[0].Hash.String()
	w := e.token("models/a/b", auth.Write)
	expect(t, e.do("POST", path, w, f.xorbs[0]), 200)
	expect(t, e.do("HEAD", path, w, nil), 200)

	// Two trickling uploads take the whole budget; a third waits ingest_wait, then 503.
	for range 2 {
		pr, pw := io.Pipe()
		req, _ := http.NewRequest("POST", e.ts.URL+path, pr)
		req.Header.Set("Authorization", "Bearer "+e.token("models/a/hog", auth.Write))
		req.ContentLength = int64(len(f.xorbs[0]))
		c := make(chan struct{})
		go func() {
			defer close(c)
			if resp, err := e.ts.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		pw.Write(f.xorbs[0][:1<<20])
		defer func() {
			pw.CloseWithError(io.ErrUnexpectedEOF)
			select {
			case <-c:
			case <-time.After(10 * time.Second):
				t.Error("a trickling upload was not answered 10 s after its body broke off")
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	resp := e.do("POST", path, e.token("models/a/c", auth.Write), f.xorbs[0])
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("upload with the budget held by two trickling uploads: %d (Retry-After %q); want 503",
			resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("refused only after %v (ingest_wait 300ms)", took)
	}
	resp.Body.Close()
}

// TestXorbStreamRejectsLeaveNoTrace: streamed uploads that are refused — oversized without a
// declared length, too slow, cut off, of another hash, corrupt in the middle — leave no
// object, no index row and no temporary file in the store.
func TestXorbStreamRejectsLeaveNoTrace(t *testing.T) {
	e := newEnv(t, sqliteLocal(), withPace(1<<20, 50*time.Millisecond))
	f := makeFixture(t, 32, 1, 64, 16<<10)
	other := makeFixture(t, 33, 1, 5, 3000)
	body := f.xorbs[0]
	h := f.layouts[0].Hash
	path := "/v1/xorbs/default/" + h.String()
	w := e.token("s", auth.Write)

	// Oversized, without Content-Length (chunked): cut at the limit while streaming.
	big := io.MultiReader(bytes.NewReader(body), bytes.NewReader(make([]byte, ingest.MaxXorbBody)))
	req, _ := http.NewRequest("POST", e.ts.URL+path, big)
	req.Header.Set("Authorization", "Bearer "+w)
	resp, err := e.ts.Client().Do(req)
	if err == nil {
		if resp.StatusCode != http.StatusRequestEntityTooLarge && resp.StatusCode != http.StatusBadRequest {
			t.Errorf("oversized chunked body: %d; want 413 (or 400: trailing bytes seen first)", resp.StatusCode)
		}
		resp.Body.Close()
	}
	// Half the body, then nothing: the pace floor cuts it off.
	if status, b := e.rawRequest("POST", path, w, int64(len(body)), body[:len(body)/2]); !strings.HasPrefix(status, "408") {
		t.Errorf("slow: %s %s", status, b)
	}
	flipped := bytes.Clone(body)
	flipped[len(body)*3/4] ^= 0x55
	expect(t, e.do("POST", path, w, flipped), 400)
	expect(t, e.do("POST", "/v1/xorbs/default/"+other.layouts[0].Hash.String(), w, body), 400)
	expect(t, e.do("POST", path, w, body[:len(body)-3]), 400)

	expect(t, e.do("HEAD", path, w, nil), 404)
	if e.stored(ingest.XorbKey(h)) || e.stored(ingest.XorbKey(other.layouts[0].Hash)) {
		t.Fatal("a rejected xorb left an object behind")
	}
	deadline := time.Now().Add(5 * time.Second)
	for left := localTempFiles(t, e); len(left) > 0; left = localTempFiles(t, e) {
		if time.Now().After(deadline) {
			t.Fatalf("temporary files left: %v", left)
		}
		time.Sleep(50 * time.Millisecond) // a handler may still be unwinding a cut-off body
	}
	// The valid body still goes in.
	expect(t, e.do("POST", path, w, body), 200)
	if left := localTempFiles(t, e); len(left) > 0 {
		t.Fatalf("temporary files left after a stored upload: %v", left)
	}
}

// TestXorbSpoolMemory: on S3 a xorb upload is validated as it arrives but its object is held
// in memory until the one conditional PUT, reserved from limits.ingest_memory segment by
// segment as it grows. With a budget of xorb.StreamMemory and 4 MiB, a ~2 MiB xorb is stored
// and a ~9 MiB one is refused with 503 + Retry-After after ingest_wait, storing nothing; and
// the budget is whole again afterwards (the small one goes in again).
func TestXorbSpoolMemory(t *testing.T) {
	e := newEnv(t, postgresMinIO(), func(c *config.Config) {
		c.Limits.IngestMemory = xorb.StreamMemory + 4<<20
		c.Limits.IngestWait = config.Duration(300 * time.Millisecond)
	})
	small := makeFixture(t, 34, 1, 48, 64<<10)
	big := makeFixture(t, 35, 1, 200, 64<<10)
	if len(small.xorbs[0]) > 4<<20-1<<20 || len(big.xorbs[0]) < 6<<20 {
		t.Fatalf("fixtures of %d and %d bytes do not straddle the budget", len(small.xorbs[0]), len(big.xorbs[0]))
	}
	w := e.token("models/a/b", auth.Write)
	bigPath := "/v1/xorbs/default/" + big.layouts[0].Hash.String()
	start := time.Now()
	resp := e.do("POST", bigPath, w, big.xorbs[0])
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("xorb of %d bytes with %d of ingest memory: %d (Retry-After %q); want 503",
			len(big.xorbs[0]), e.cfg.Limits.IngestMemory, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	resp.Body.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("refused only after %v (ingest_wait 300ms)", took)
	}
	if e.stored(ingest.XorbKey(big.layouts[0].Hash)) {
		t.Fatal("a refused xorb left an object behind")
	}
	expect(t, e.do("HEAD", bigPath, w, nil), 404)
	smallPath := "/v1/xorbs/default/" + small.layouts[0].Hash.String()
	for range 2 {
		expect(t, e.do("POST", smallPath, w, small.xorbs[0]), 200)
	}
	expect(t, e.do("HEAD", smallPath, w, nil), 200)
}
