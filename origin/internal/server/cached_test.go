package server

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// cachedStack wraps b's index the way the origin does (backend.Open): a FileCache over a
// LayoutCache over the database.
func cachedStack(b backend) backend {
	return backend{name: b.name + "+caches", open: func(t testing.TB) (index.Index, objstore.ObjectStore) {
		db, objs := b.open(t)
		l, err := index.NewLayoutCache(db, 16<<20)
		if err != nil {
			t.Fatal(err)
		}
		f, err := index.NewFileCache(l, index.FileCacheOptions{MaxBytes: 16 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f, objs
	}}
}

func TestReconstructionCached(t *testing.T) {
	for _, b := range backends(t) {
		b := cachedStack(b)
		t.Run(b.name, func(t *testing.T) { testReconstruction(t, b) })
	}
}

// TestInternalAPIStoredEncodings checks that the internal API ships exactly the stored
// encodings, through the caches and without them, and that a Hide through the caches is seen by
// every read route at once.
func TestInternalAPIStoredEncodings(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			db, objs := b.open(t)
			raw := db
			cached := cachedStack(backend{open: func(testing.TB) (index.Index, objstore.ObjectStore) { return db, objs }})
			idx, _ := cached.open(t)
			e := newEnvWith(t, idx, objs)
			plain := newEnvWith(t, db, objs) // no caches
			f := makeFixture(t, 33, 3, 5, 700)
			scope := "models/i/cached"
			e.upload(f, scope)
			ctx := context.Background()
			edge := e.token("edge-eu", auth.Edge)
			plainEdge := plain.token("edge-eu", auth.Edge)

			filePath := "/internal/v1/files/" + f.file.String() + "?scope=" + scope
			want, err := raw.FileBytes(ctx, f.file, scope)
			if err != nil {
				t.Fatal(err)
			}
			for round := range 2 { // cold, then warm caches
				if got := expect(t, e.do("GET", filePath, edge, nil), 200); !bytes.Equal(got, want) {
					t.Fatalf("round %d: internal file answer differs from the stored record", round)
				}
				expect(t, e.do("HEAD", filePath, edge, nil), 200)
			}
			if got := expect(t, plain.do("GET", filePath, plainEdge, nil), 200); !bytes.Equal(got, want) {
				t.Fatal("internal file answer without the caches differs from the stored record")
			}

			unknown := hash.Chunk([]byte("unknown"))
			hs := []hash.Hash{f.layouts[2].Hash, unknown, f.layouts[0].Hash, f.layouts[2].Hash, f.layouts[1].Hash}
			stored, err := raw.LayoutBytes(ctx, hs)
			if err != nil {
				t.Fatal(err)
			}
			// Expected answer: count, then each found xorb once in request order.
			exp := []byte{3, 0, 0, 0}
			for _, h := range []hash.Hash{f.layouts[2].Hash, f.layouts[0].Hash, f.layouts[1].Hash} {
				n := len(stored[h])
				exp = append(append(exp, h[:]...), byte(n), byte(n>>8), byte(n>>16), byte(n>>24))
				exp = append(exp, stored[h]...)
			}
			path := "/internal/v1/layouts?"
			for i, h := range hs {
				if i > 0 {
					path += "&"
				}
				path += "h=" + h.String()
			}
			for round := range 2 {
				if got := expect(t, e.do("GET", path, edge, nil), 200); !bytes.Equal(got, exp) {
					t.Fatalf("round %d: layouts answer differs from the stored encodings", round)
				}
			}
			if got := expect(t, plain.do("GET", path, plainEdge, nil), 200); !bytes.Equal(got, exp) {
				t.Fatal("layouts answer without the caches differs from the stored encodings")
			}

			// Warm the record cache through the client routes, then hide through the caches.
			r := e.token(scope, auth.Read)
			recon := "/v2/reconstructions/" + f.file.String()
			for range 3 {
				expect(t, e.do("GET", recon, r, nil), 200)
				expect(t, e.do("HEAD", "/v1/files/"+f.file.String(), r, nil), 200)
			}
			if err := idx.Hide(ctx, scope, []hash.Hash{f.file}); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct{ method, path, token string }{
				{"GET", recon, r},
				{"GET", "/v1/reconstructions/" + f.file.String(), r},
				{"HEAD", "/v1/files/" + f.file.String(), r},
				{"GET", filePath, edge},
				{"HEAD", filePath, edge},
			} {
				t.Run(fmt.Sprint(c.method, " ", c.path), func(t *testing.T) {
					expect(t, e.do(c.method, c.path, c.token, nil), 404)
				})
			}
		})
	}
}
