package server

import (
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/readpath/readpathtest"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// TestReadPathConformance runs the readpath.Source conformance suite (and the shared handlers
// over it) on the origin's Source: SQLite + local disk and Postgres + MinIO, each bare and
// behind the record and layout caches, always under the production layers (timeouts,
// metrics). A Hide through the index is seen at once.
func TestReadPathConformance(t *testing.T) {
	for _, b := range backends(t) {
		for _, b := range []backend{b, cachedStack(b)} {
			t.Run(b.name, func(t *testing.T) {
				e := newEnv(t, b)
				f := makeFixture(t, 11, 3, 5, 3000)
				const scope = "models/read/path"
				e.upload(f, scope)
				src := Source{Index: e.srv.idx, Objects: e.srv.objs}
				fx := &readpathtest.Fixture{Source: src, Scope: scope, File: f.file, Size: uint64(len(f.data)),
					Xorbs: map[hash.Hash][]byte{},
					Hide: func(t *testing.T) {
						if err := e.srv.idx.(index.Index).Hide(t.Context(), scope, []hash.Hash{f.file}); err != nil {
							t.Fatal(err)
						}
					}}
				for i, l := range f.layouts {
					fx.Xorbs[l.Hash] = f.xorbs[i]
				}
				readpathtest.Run(t, fx)
			})
		}
	}
}
