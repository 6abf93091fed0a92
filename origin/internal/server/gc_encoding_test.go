package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/ingest"
	"github.com/xetcdn/xetcdn/origin/internal/lifecycle"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// The tests below hold an upload acknowledged only if the object under its xorb's key is the
// one the index row describes (docs/decisions.md, 2026-12-02 "No acknowledged xorb without the
// indexed object"): with a collection deleting an object between an upload's object write and
// its row (only with a grace period shorter than an upload, or an orphan being deleted), and
// uploads of the same xorb in other encodings, or the store failing meanwhile.

// encodedXorb is one xorb in the three encodings a client may send (the hash covers the chunks,
// not their compression), each with its own layout: other chunk offsets.
type encodedXorb struct {
	h      hash.Hash
	bodies map[xorb.Scheme][]byte
}

func newEncodedXorb(t *testing.T, rng *rand.Rand) *encodedXorb {
	t.Helper()
	var raws [][]byte
	for range 3 {
		raw := make([]byte, 0, 8192)
		for len(raw) < 6000 {
			// Compressible, and differently so with byte grouping: four-byte records.
			v := uint32(rng.IntN(64))
			raw = append(raw, byte(v), byte(v>>8), 0, byte(rng.IntN(4)))
		}
		raws = append(raws, raw)
	}
	x := &encodedXorb{bodies: map[xorb.Scheme][]byte{}}
	var ends [][]uint32
	for _, s := range []xorb.Scheme{xorb.None, xorb.LZ4, xorb.ByteGrouping4LZ4} {
		b := xorb.NewBuilder(s)
		for _, raw := range raws {
			b.Add(raw, hash.Chunk(raw))
		}
		body, l := b.Finish()
		if s != xorb.None && x.h != l.Hash {
			t.Fatal("encodings of one xorb have different hashes")
		}
		x.h = l.Hash
		for _, e := range ends {
			if slices.Equal(e, l.StoredEnds) {
				t.Fatalf("two encodings with the same chunk offsets %v: the test needs them to differ", e)
			}
		}
		ends = append(ends, l.StoredEnds)
		x.bodies[s] = body
	}
	return x
}

// storedForm is body as the origin stores it: its chunk area and a v1 footer.
func storedForm(t *testing.T, body []byte, h hash.Hash) []byte {
	t.Helper()
	l, area, err := xorb.Validate(body, xorb.ValidateOptions{Expect: &h})
	if err != nil {
		t.Fatal(err)
	}
	return append(bytes.Clone(body[:area]), xorb.AppendFooter(nil, l, 0)...)
}

// layoutOf validates obj, a stored object of xorb h, and returns its layout.
func layoutOf(t *testing.T, obj []byte, h hash.Hash) *xorb.Layout {
	t.Helper()
	l, _, err := xorb.Validate(obj, xorb.ValidateOptions{Expect: &h})
	if err != nil {
		t.Fatalf("stored object of %s: %v", h, err)
	}
	return l
}

// checkIndexedObject fails unless xorb h is indexed and its object stored with the indexed size
// and the indexed chunk offsets (the ones readers follow).
func checkIndexedObject(t *testing.T, e *env, h hash.Hash) {
	t.Helper()
	ctx := context.Background()
	size, err := e.idx.XorbSize(ctx, h)
	if err != nil {
		t.Fatalf("index: %v", err)
	}
	ls, err := e.idx.Layouts(ctx, []hash.Hash{h})
	if err != nil || ls[h] == nil {
		t.Fatalf("index layout: %v %v", ls, err)
	}
	rc, n, err := e.objs.Get(ctx, ingest.XorbKey(h))
	if err != nil {
		t.Fatalf("object of the indexed xorb: %v", err)
	}
	obj, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if uint64(n) != size || !slices.Equal(layoutOf(t, obj, h).StoredEnds, ls[h].StoredEnds) {
		t.Fatalf("the object under the key (%d bytes, chunk ends %v) is not the indexed one (%d bytes, chunk ends %v)",
			n, layoutOf(t, obj, h).StoredEnds, size, ls[h].StoredEnds)
	}
}

// heldIndex holds the n-th PutXorb of xorb x (1-based) until gate[n] is closed, after
// closing reached[n]: the moment between an upload's object write and its index row.
type heldIndex struct {
	index.Index
	x       hash.Hash
	calls   atomic.Int32
	reached map[int32]chan struct{}
	gate    map[int32]chan struct{}
}

func newHeldIndex(idx index.Index, x hash.Hash, n int32) *heldIndex {
	g := &heldIndex{Index: idx, x: x, reached: map[int32]chan struct{}{}, gate: map[int32]chan struct{}{}}
	for i := int32(1); i <= n; i++ {
		g.reached[i], g.gate[i] = make(chan struct{}), make(chan struct{})
	}
	return g
}

func (g *heldIndex) Unwrap() index.Index { return g.Index }

func (g *heldIndex) PutXorb(ctx context.Context, l *xorb.Layout, storedSize uint64) (bool, error) {
	if l.Hash == g.x {
		n := g.calls.Add(1)
		if r, ok := g.reached[n]; ok {
			close(r)
			<-g.gate[n]
		}
	}
	return g.Index.PutXorb(ctx, l, storedSize)
}

// open releases every gate still closed (at the end of a failed test).
func (g *heldIndex) open() {
	for _, c := range g.gate {
		select {
		case <-c:
		default:
			close(c)
		}
	}
}

func waitFor(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not within 30 s", what)
	}
}

// upload posts body as xorb h in the background; the answer arrives on the channel.
func (e *env) postXorbAsync(h hash.Hash, body []byte) <-chan *http.Response {
	done := make(chan *http.Response, 1)
	tok := e.token("models/t/encodings", auth.Write)
	go func() { done <- e.do("POST", "/v1/xorbs/default/"+h.String(), tok, body) }()
	return done
}

func answer(t *testing.T, c <-chan *http.Response, what string) (int, string) {
	t.Helper()
	select {
	case resp := <-c:
		return resp.StatusCode, string(read(t, resp))
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer within 30 s", what)
	}
	return 0, ""
}

// collectOrphan runs a collection that must delete the object under x's key as an orphan.
func collectOrphan(t *testing.T, e *env, idx index.Index, objs lifecycle.GCObjects, h hash.Hash) {
	t.Helper()
	rep, err := lifecycle.GC(t.Context(), idx, objs, lifecycle.GCOptions{Grace: tempGrace})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Orphans != 1 || e.stored(ingest.XorbKey(h)) {
		t.Fatalf("the collection deleted %d orphans (object still there: %v); the interleaving needs the one under the xorb's key",
			rep.Orphans, e.stored(ingest.XorbKey(h)))
	}
}

// TestXorbUploadEncodingsRaceOrphanDeletion: uploads of one xorb in different encodings race a
// collection that deletes the object under its key as an orphan before the first row is in.
// The upload that inserts the row must leave the key holding the encoding its row describes,
// although another upload has meanwhile created its own encoding under the key. Before, the
// inserter only checked that some object was there: the row described one encoding, the key
// held another, and every read of the acknowledged xorb failed chunk verification.
//
//   - own: upload A (no compression) created its object and waits at its index write; the
//     collection deletes it; upload B (LZ4) creates its object and waits too; A inserts its row
//     and must put its own bytes back (local disk: its staged file, renamed over the key; S3:
//     its spool).
//   - read-back: an orphan (LZ4) is under the key; upload A (no compression) finds it, reads it
//     back and waits at its index write; the collection deletes the orphan; upload B (byte
//     grouping) creates its object and waits; A inserts the orphan's layout and must put the
//     bytes it read back.
func TestXorbUploadEncodingsRaceOrphanDeletion(t *testing.T) {
	for _, b := range backends(t) {
		b := cachedStack(b)
		for _, readBack := range []bool{false, true} {
			name := b.name + "/own"
			if readBack {
				name = b.name + "/read-back"
			}
			t.Run(name, func(t *testing.T) {
				idx, objs := b.open(t)
				x := newEncodedXorb(t, rand.New(rand.NewPCG(7, 8)))
				key := ingest.XorbKey(x.h)
				first, second := xorb.None, xorb.LZ4
				if readBack {
					orphan := storedForm(t, x.bodies[xorb.LZ4], x.h) // stored by an attempt the index refused, say
					if err := objs.Create(t.Context(), key, bytes.NewReader(orphan), int64(len(orphan))); err != nil {
						t.Fatal(err)
					}
					time.Sleep(1100 * time.Millisecond) // object stores' times may have 1 s steps
					second = xorb.ByteGrouping4LZ4
				}
				g := newHeldIndex(idx, x.h, 2)
				defer g.open()
				e := newEnvWith(t, g, objs)
				a := e.postXorbAsync(x.h, x.bodies[first])
				waitFor(t, g.reached[1], "upload A at its index write")
				if !readBack {
					time.Sleep(4 * tempGrace)
				}
				collectOrphan(t, e, idx, objs, x.h)
				bb := e.postXorbAsync(x.h, x.bodies[second])
				waitFor(t, g.reached[2], "upload B at its index write")
				if !e.stored(key) {
					t.Fatal("upload B stored no object")
				}
				close(g.gate[1])
				if st, body := answer(t, a, "upload A"); st != http.StatusOK {
					t.Fatalf("upload A: %d %s; want 200", st, body)
				}
				close(g.gate[2])
				if st, body := answer(t, bb, "upload B"); st != http.StatusOK {
					t.Fatalf("upload B: %d %s; want 200", st, body)
				}
				checkIndexedObject(t, e, x.h)
			})
		}
	}
}

// restoringObjects is the store a collection sees, with an upload run right after it deletes
// the object under key (between its Delete and its index re-check: deleteOrphan; a store with a
// Mover or a MatchMover, local disk and S3, moves it instead, see the Failpoint in
// TestXorbOrphanRestoreKeepsUpload).
type restoringObjects struct {
	objstore.ObjectStore
	key   string
	after func()
	once  sync.Once
}

func (r *restoringObjects) Unwrap() objstore.ObjectStore { return r.ObjectStore }

func (r *restoringObjects) Delete(ctx context.Context, key string) error {
	err := r.ObjectStore.Delete(ctx, key)
	if err == nil && key == r.key {
		r.once.Do(r.after)
	}
	return err
}

// TestXorbOrphanRestoreKeepsUpload: a collection reads an orphan (LZ4) and deletes it; right
// then an upload of the same xorb in another encoding (byte grouping) creates its object and
// inserts its row, and is acknowledged. The collection, re-checking the index, finds a row and
// puts its copy back: it must not replace the upload's object. Before, it did (Put), and the
// key held an encoding the row did not describe. Happens with any grace period: the orphan is
// old, the upload a normal one.
func TestXorbOrphanRestoreKeepsUpload(t *testing.T) {
	for _, b := range backends(t) {
		b := cachedStack(b)
		t.Run(b.name, func(t *testing.T) {
			idx, objs := b.open(t)
			x := newEncodedXorb(t, rand.New(rand.NewPCG(9, 10)))
			key := ingest.XorbKey(x.h)
			orphan := storedForm(t, x.bodies[xorb.LZ4], x.h)
			if err := objs.Create(t.Context(), key, bytes.NewReader(orphan), int64(len(orphan))); err != nil {
				t.Fatal(err)
			}
			time.Sleep(1100 * time.Millisecond)
			e := newEnvWith(t, idx, objs)
			var st int
			var body string
			gcObjs := &restoringObjects{ObjectStore: objs, key: key, after: func() {
				st, body = answer(t, e.postXorbAsync(x.h, x.bodies[xorb.ByteGrouping4LZ4]), "the upload")
			}}
			// On a store with a Mover or a MatchMover the orphan is moved into the trash, not
			// deleted: the upload runs at the step after that.
			rep, err := lifecycle.GC(t.Context(), idx, gcObjs, lifecycle.GCOptions{Grace: tempGrace, Failpoint: func(step string) {
				if step == lifecycle.StepOrphanTrashed {
					gcObjs.once.Do(gcObjs.after)
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			if st != http.StatusOK {
				t.Fatalf("upload during the orphan's deletion: %d %s; want 200", st, body)
			}
			if rep.Orphans != 0 {
				t.Errorf("the collection counted %d orphans deleted; the key is indexed", rep.Orphans)
			}
			checkIndexedObject(t, e, x.h)
		})
	}
}

// failingObjects fails the first Stat of key once armed: the store failing right after an
// upload's row is in, when it checks (and would put back) the object a collection deleted.
type failingObjects struct {
	objstore.ObjectStore
	key   string
	armed atomic.Bool
	fails atomic.Int32
}

func (f *failingObjects) Unwrap() objstore.ObjectStore { return f.ObjectStore }

func (f *failingObjects) Stat(ctx context.Context, key string) (int64, error) {
	if key == f.key && f.armed.CompareAndSwap(true, false) {
		f.fails.Add(1)
		return 0, fmt.Errorf("stat %s: %w: injected outage", key, objstore.ErrUnavailable)
	}
	return f.ObjectStore.Stat(ctx, key)
}

// TestXorbUploadRestoreFails: an upload's object is deleted by a collection before its row is
// in, and when the upload has inserted its row the store fails (the check of the object, where
// the upload would put its bytes back). The upload answers 503; the client's retry must not be
// acknowledged until the object is stored again. Before, the retry found the xorb indexed and
// was answered 200 with no object behind the row: an acknowledged upload lost.
func TestXorbUploadRestoreFails(t *testing.T) {
	for _, b := range backends(t) {
		b := cachedStack(b)
		t.Run(b.name, func(t *testing.T) {
			idx, objs := b.open(t)
			x := newEncodedXorb(t, rand.New(rand.NewPCG(11, 12)))
			key := ingest.XorbKey(x.h)
			fo := &failingObjects{ObjectStore: objs, key: key}
			g := newHeldIndex(idx, x.h, 1)
			defer g.open()
			e := newEnvWith(t, g, fo)
			body := x.bodies[xorb.LZ4]
			a := e.postXorbAsync(x.h, body)
			waitFor(t, g.reached[1], "the upload at its index write")
			time.Sleep(4 * tempGrace)
			collectOrphan(t, e, idx, objs, x.h)
			fo.armed.Store(true)
			close(g.gate[1])
			st, msg := answer(t, a, "the upload")
			if fo.fails.Load() != 1 {
				t.Fatalf("the injected failure was not reached (answer %d %s)", st, msg)
			}
			if st != http.StatusServiceUnavailable {
				t.Fatalf("upload whose object check failed: %d %s; want 503", st, msg)
			}
			if st, msg := answer(t, e.postXorbAsync(x.h, body), "the retry"); st != http.StatusOK {
				t.Fatalf("retry: %d %s; want 200", st, msg)
			}
			checkIndexedObject(t, e, x.h)
		})
	}
}

// TestXorbUploadAckChecksEncoding: the index has a xorb whose key holds another encoding of the
// row's exact size (the state an upload leaves when it found that encoding under the key after
// its row was in and failing to replace it: the store failed). Two identical chunks, one
// compressed and one not, in either order: same size, other chunk offsets. An upload of the
// other encoding must not be acknowledged (503: it cannot make the key match the row); one of
// the row's encoding must put its bytes back before its 200. Before, a duplicate upload was
// acknowledged on the row alone, and every read of the xorb failed chunk verification.
func TestXorbUploadAckChecksEncoding(t *testing.T) {
	raw := bytes.Repeat([]byte("xetcdn acknowledges stored bytes only. "), 150)
	h := hash.Chunk(raw)
	body := func(first, second xorb.Scheme) []byte {
		b, s1 := xorb.AppendCompressed(nil, raw, first)
		b, s2 := xorb.AppendCompressed(b, raw, second)
		if s1 != first || s2 != second {
			t.Fatalf("schemes %v %v written as %v %v", first, second, s1, s2)
		}
		return b
	}
	rowEnc, otherEnc := body(xorb.LZ4, xorb.None), body(xorb.None, xorb.LZ4)
	xh := hash.Merkle([]hash.Leaf{{Hash: h, Size: uint64(len(raw))}, {Hash: h, Size: uint64(len(raw))}})
	rowObj, otherObj := storedForm(t, rowEnc, xh), storedForm(t, otherEnc, xh)
	if len(rowObj) != len(otherObj) || slices.Equal(layoutOf(t, rowObj, xh).StoredEnds, layoutOf(t, otherObj, xh).StoredEnds) {
		t.Fatal("the test needs two encodings of one size with other chunk offsets")
	}
	for _, b := range backends(t) {
		b := cachedStack(b)
		t.Run(b.name, func(t *testing.T) {
			e := newEnv(t, b)
			if st, msg := answer(t, e.postXorbAsync(xh, rowEnc), "first upload"); st != http.StatusOK {
				t.Fatalf("first upload: %d %s", st, msg)
			}
			checkIndexedObject(t, e, xh)
			key := ingest.XorbKey(xh)
			if err := e.objs.Put(t.Context(), key, bytes.NewReader(otherObj), int64(len(otherObj))); err != nil {
				t.Fatal(err)
			}
			if st, msg := answer(t, e.postXorbAsync(xh, otherEnc), "upload of the other encoding"); st != http.StatusServiceUnavailable {
				t.Fatalf("upload of the encoding under the key but not in the row: %d %s; want 503", st, msg)
			}
			if st, msg := answer(t, e.postXorbAsync(xh, rowEnc), "upload of the row's encoding"); st != http.StatusOK {
				t.Fatalf("upload of the row's encoding: %d %s; want 200", st, msg)
			}
			checkIndexedObject(t, e, xh)
		})
	}
}
