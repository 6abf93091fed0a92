package server

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/ingest"
	"github.com/xetcdn/xetcdn/origin/internal/lifecycle"
	"github.com/xetcdn/xetcdn/shared/auth"
)

// The two interleavings below are the 404 once seen in TestGCRace (docs/decisions.md,
// 2026-12-02 "A live write's temporary file is not garbage"): a collection with a short grace
// period removed the temporary file of a xorb upload still in flight (its last write older than
// the cutoff), and the upload's link of that file to the key then failed with "no such file",
// which the local store reported as objstore.ErrNotFound and the server as 404 not_found. A
// client does not retry a 404.

const tempGrace = 30 * time.Millisecond // TestGCRace's

// waitTemps waits (bounded) until e's local store holds n temporary files.
func waitTemps(t *testing.T, e *env, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(localTempFiles(t, e)) != n; {
		if time.Now().After(deadline) {
			t.Fatalf("temporary files: %v, want %d", localTempFiles(t, e), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkStored fails unless xorb x is indexed and its object stored with the indexed size.
func checkStored(t *testing.T, e *env, x *raceXorb) {
	t.Helper()
	ctx := context.Background()
	size, err := e.idx.XorbSize(ctx, x.layout.Hash)
	if err != nil {
		t.Fatalf("index after the upload: %v", err)
	}
	got, err := e.objs.Stat(ctx, ingest.XorbKey(x.layout.Hash))
	if err != nil || uint64(got) != size {
		t.Fatalf("object after the upload: %d bytes, %v; the index says %d", got, err, size)
	}
}

// TestXorbUploadTempCollectedMidBody: a collection runs while a streamed upload's body is
// still arriving, its temporary file's last write older than the grace period. The upload is
// stored and answered 200 (never 404), and the collection leaves the in-flight file alone.
func TestXorbUploadTempCollectedMidBody(t *testing.T) {
	e := newEnv(t, cachedStack(sqliteLocal()))
	x := newRaceXorb(rand.New(rand.NewPCG(1, 2)))
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", e.ts.URL+"/v1/xorbs/default/"+x.layout.Hash.String(), pr)
	req.Header.Set("Authorization", "Bearer "+e.token("models/t/mid", auth.Write))
	req.ContentLength = int64(len(x.body))
	type answer struct {
		status int
		body   string
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := e.ts.Client().Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- answer{resp.StatusCode, string(b), err}
	}()
	cut := len(x.body) - 8 // the last chunk is not complete: nothing more reaches the file
	if _, err := pw.Write(x.body[:cut]); err != nil {
		t.Fatal(err)
	}
	waitTemps(t, e, 1)
	time.Sleep(4 * tempGrace) // the file's last write is now older than any cutoff below
	rep, err := lifecycle.GC(t.Context(), e.idx, e.objs, lifecycle.GCOptions{Grace: tempGrace})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pw.Write(x.body[cut:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	var a answer
	select {
	case a = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("no answer to the upload")
	}
	if a.err != nil || a.status != http.StatusOK {
		t.Fatalf("upload whose temporary file met a collection: %d %s %v; want 200", a.status, a.body, a.err)
	}
	if rep.TempFiles != 0 {
		t.Errorf("the collection removed %d temporary files, want 0 (the one there was in use)", rep.TempFiles)
	}
	checkStored(t, e, x)
	waitTemps(t, e, 0)
}

// TestXorbUploadOrphanedBeforeIndexed: an upload stored its object and, before its index row
// is in, a collection deletes that object as an orphan (its last write older than the grace
// period) and looks at the upload's temporary file. The upload puts its bytes back
// (ingest's ensureStored) and answers 200 (never 404), and the object is there, as indexed.
// On every backend: the local disk keeps the bytes in the upload's temporary file, S3 in its
// spool.
func TestXorbUploadOrphanedBeforeIndexed(t *testing.T) {
	for _, b := range backends(t) {
		b := cachedStack(b)
		t.Run(b.name, func(t *testing.T) {
			idx, objs := b.open(t)
			x := newRaceXorb(rand.New(rand.NewPCG(3, 4)))
			g := newHeldIndex(idx, x.layout.Hash, 1) // gc_encoding_test.go
			defer g.open()
			e := newEnvWith(t, g, objs)
			done := e.postXorbAsync(x.layout.Hash, x.body)
			waitFor(t, g.reached[1], "the upload at its index write")
			if !e.stored(ingest.XorbKey(x.layout.Hash)) {
				t.Fatal("no object before the index write")
			}
			time.Sleep(4 * tempGrace)
			collectOrphan(t, e, idx, objs, x.layout.Hash)
			close(g.gate[1])
			if st, body := answer(t, done, "the upload"); st != http.StatusOK {
				t.Fatalf("upload whose object was collected before its index row: %d %s; want 200", st, body)
			}
			checkStored(t, e, x)
		})
	}
}

// TestXorbUploadOrphanReadBack: an upload finds an orphan under its xorb's key (an object with
// no index row: here the one an earlier attempt stored before the index refused it), reads it
// back to index it, and before its row is in a collection deletes that orphan. The row the
// upload then inserts describes bytes it read; it must put those back. Before, it answered 503
// and left the row without its object: the client's retry found the xorb indexed and was
// acknowledged, and every file referencing the xorb would fail to download. Asked as a client
// asks (503 retried), the upload must end acknowledged with its object stored.
func TestXorbUploadOrphanReadBack(t *testing.T) {
	for _, b := range backends(t) {
		b := cachedStack(b)
		t.Run(b.name, func(t *testing.T) {
			idx, objs := b.open(t)
			x := newRaceXorb(rand.New(rand.NewPCG(5, 6)))
			obj := storedForm(t, x.body, x.layout.Hash) // gc_encoding_test.go
			key := ingest.XorbKey(x.layout.Hash)
			if err := objs.Create(t.Context(), key, bytes.NewReader(obj), int64(len(obj))); err != nil {
				t.Fatal(err)
			}
			// Old enough for the collection below (object stores' times may have 1 s steps).
			time.Sleep(1100 * time.Millisecond)
			g := newHeldIndex(idx, x.layout.Hash, 1)
			defer g.open()
			e := newEnvWith(t, g, objs)
			done := e.postXorbAsync(x.layout.Hash, x.body)
			waitFor(t, g.reached[1], "the upload at its index write")
			collectOrphan(t, e, idx, objs, x.layout.Hash)
			close(g.gate[1])
			st, body := answer(t, done, "the upload")
			for attempt := 0; st == http.StatusServiceUnavailable && attempt < 3; attempt++ {
				st, body = answer(t, e.postXorbAsync(x.layout.Hash, x.body), "the retry")
			}
			if st != http.StatusOK {
				t.Fatalf("upload: %d %s; want 200", st, body)
			}
			checkStored(t, e, x)
		})
	}
}
