package ingest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// encodings are the chunk encodings clients use; one xorb hash covers all of them.
var encodings = []xorb.Scheme{xorb.None, xorb.LZ4, xorb.ByteGrouping4LZ4}

// sameChunks returns n compressible chunks and the upload body of one xorb of them in each of
// encodings (bodies[i] is encodings[i]); every body has the same xorb hash.
func sameChunks(t *testing.T, seed uint64, n int) (chunks [][]byte, bodies [][]byte, h hash.Hash) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 3))
	for range n {
		raw := make([]byte, 2000+rng.IntN(6000))
		for i := range raw {
			raw[i] = byte('a' + rng.IntN(3))
		}
		chunks = append(chunks, raw)
	}
	for i, s := range encodings {
		b := xorb.NewBuilder(s)
		for _, raw := range chunks {
			b.Add(raw, hash.Chunk(raw))
		}
		body, l := b.Finish()
		if i > 0 && l.Hash != h {
			t.Fatalf("encoding %v: hash %s, want %s", s, l.Hash, h)
		}
		for j, other := range bodies {
			if len(body) == len(other) {
				t.Fatalf("encoding %v is as long as %v: the fixture does not tell encodings apart", s, encodings[j])
			}
		}
		h = l.Hash
		bodies = append(bodies, body)
	}
	return chunks, bodies, h
}

// storedObject returns the stored bytes of xorb h (nil if there are none).
func storedObject(t *testing.T, st Objects, h hash.Hash) []byte {
	t.Helper()
	rc, _, err := st.Get(context.Background(), XorbKey(h))
	if errors.Is(err, objstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkServable fails unless the index's layout of h describes the stored object exactly: the
// same size, and every chunk read at the index's byte offsets decodes to the chunk uploaded.
func checkServable(t *testing.T, db index.Index, st Objects, h hash.Hash, chunks [][]byte) {
	t.Helper()
	ctx := context.Background()
	size, err := db.XorbSize(ctx, h)
	if err != nil {
		t.Fatalf("xorb %s not indexed: %v", h, err)
	}
	ls, err := db.Layouts(ctx, []hash.Hash{h})
	if err != nil || ls[h] == nil {
		t.Fatalf("layout of %s: %v", h, err)
	}
	l := ls[h]
	obj := storedObject(t, st, h)
	if uint64(len(obj)) != size {
		t.Fatalf("index says %s is %d bytes, the store holds %d", h, size, len(obj))
	}
	for i := range l.NumChunks() {
		a, b := l.ByteRange(uint32(i), uint32(i+1))
		if int(b) > len(obj) {
			t.Fatalf("chunk %d at [%d, %d) is past the stored %d bytes", i, a, b, len(obj))
		}
		raw, _, err := xorb.NewChunkReader(bytes.NewReader(obj[a:b])).Next()
		if err != nil || !bytes.Equal(raw, chunks[i]) {
			t.Fatalf("chunk %d at the index's offsets [%d, %d) of the stored object: %v (equal: %v)",
				i, a, b, err, bytes.Equal(raw, chunks[i]))
		}
	}
}

// TestPutXorbEncodingRace: uploads of one xorb in different encodings, at once, through two
// Services sharing an index and a store (two replicas: no in-process state in common). All
// succeed and the index describes the stored object, whichever won.
func TestPutXorbEncodingRace(t *testing.T) {
	svc, db, st := newService(t)
	replica := New(Options{Index: db, Objects: st})
	ctx := context.Background()
	won := map[int]int{}
	for round := range 30 {
		chunks, bodies, h := sameChunks(t, uint64(round), 6)
		var wg sync.WaitGroup
		errs := make([]error, len(bodies))
		for i := range bodies {
			s := svc
			if (round+i)%2 == 1 {
				s = replica
			}
			wg.Go(func() { _, errs[i] = s.PutXorb(ctx, "models/acme/race", Prefix, h, bodies[i]) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: upload %v: %v", round, encodings[i], err)
			}
		}
		checkServable(t, db, st, h, chunks)
		obj := storedObject(t, st, h)
		for i, b := range bodies {
			if bytes.HasPrefix(obj, b) {
				won[i]++
			}
		}
	}
	t.Logf("encodings that won the store: %v (index into %v)", won, encodings)
}

// TestPutXorbOrphan: an object left by an upload that crashed before its index commit, in
// another encoding than the next upload's. The next upload does not replace it and indexes
// its layout.
func TestPutXorbOrphan(t *testing.T) {
	for i, orphanEnc := range encodings {
		t.Run(orphanEnc.String(), func(t *testing.T) {
			svc, db, st := newService(t)
			ctx := context.Background()
			chunks, bodies, h := sameChunks(t, 100+uint64(i), 5)
			l, _, err := xorb.Validate(bodies[i], xorb.ValidateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			orphan := xorb.AppendFooter(slices.Clone(bodies[i]), l, 0)
			if err := st.Put(ctx, XorbKey(h), bytes.NewReader(orphan), int64(len(orphan))); err != nil {
				t.Fatal(err)
			}
			next := bodies[(i+1)%len(bodies)]
			ins, err := svc.PutXorb(ctx, "models/acme/race", Prefix, h, next)
			if err != nil || !ins {
				t.Fatalf("upload over the orphan: inserted %v, %v", ins, err)
			}
			if got := storedObject(t, st, h); !bytes.Equal(got, orphan) {
				t.Fatalf("the orphan was replaced (%d bytes, had %d)", len(got), len(orphan))
			}
			checkServable(t, db, st, h, chunks)
			if ins, err := svc.PutXorb(ctx, "models/acme/race", Prefix, h, next); err != nil || ins {
				t.Fatalf("upload again: inserted %v, %v", ins, err)
			}
		})
	}
}

// TestPutXorbStoredCorrupt: an unindexed object under the key that is not the xorb (damaged,
// truncated, without footer, another xorb) is neither indexed nor replaced: the upload fails
// with ErrStoredCorrupt, not with a client error, and nothing is indexed.
func TestPutXorbStoredCorrupt(t *testing.T) {
	_, bodies, h := sameChunks(t, 200, 4)
	l, _, err := xorb.Validate(bodies[1], xorb.ValidateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	whole := xorb.AppendFooter(slices.Clone(bodies[1]), l, 0)
	flipped := slices.Clone(whole)
	flipped[len(bodies[1])/2] ^= 0x40
	_, otherBodies, _ := sameChunks(t, 201, 4)
	ol, _, _ := xorb.Validate(otherBodies[0], xorb.ValidateOptions{})
	for _, c := range []struct {
		name string
		obj  []byte
	}{
		{"bit flip", flipped},
		{"truncated", whole[:len(whole)-100]},
		{"no footer", bodies[1]},
		{"another xorb", xorb.AppendFooter(slices.Clone(otherBodies[0]), ol, 0)},
		{"empty", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			svc, db, st := newService(t)
			ctx := context.Background()
			if err := st.Put(ctx, XorbKey(h), bytes.NewReader(c.obj), int64(len(c.obj))); err != nil {
				t.Fatal(err)
			}
			_, err := svc.PutXorb(ctx, "models/acme/race", Prefix, h, bodies[0])
			if !errors.Is(err, ErrStoredCorrupt) {
				t.Fatalf("err = %v, want ErrStoredCorrupt", err)
			}
			for _, client := range []error{xorb.ErrCorrupt, xorb.ErrHashMismatch, xorb.ErrEmpty, xorb.ErrTooLarge} {
				if errors.Is(err, client) {
					t.Fatalf("err %v wraps the client error %v", err, client)
				}
			}
			if _, err := db.XorbSize(ctx, h); !errors.Is(err, index.ErrNotFound) {
				t.Fatalf("corrupt object indexed: %v", err)
			}
			if got := storedObject(t, st, h); !bytes.Equal(got, c.obj) {
				t.Fatal("the stored object was replaced")
			}
		})
	}
}
