package ingest

import (
	"context"
	"fmt"
	"testing"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// BenchmarkRegisterOtherScope measures what the possession check adds to a registration whose
// terms all reference xorbs another scope uploaded (every term then costs a probe of its first
// chunk), against the same shard registered by the uploading scope (one probe per xorb). Each
// term covers one chunk, the worst case. SQLite index on the test's temp dir.
func BenchmarkRegisterOtherScope(b *testing.B) {
	for _, terms := range []int{1024, 16384} {
		for _, who := range []string{"uploader", "other"} {
			b.Run(fmt.Sprintf("terms=%d/%s", terms, who), func(b *testing.B) {
				benchRegister(b, terms, who == "other")
			})
		}
	}
}

func benchRegister(b *testing.B, terms int, other bool) {
	svc, _, _ := newService(b)
	ctx := context.Background()
	const perXorb = 256
	var layouts []*xorb.Layout
	for x := 0; x < terms/perXorb; x++ {
		bld := xorb.NewBuilder(xorb.None)
		for c := range perXorb {
			raw := []byte(fmt.Sprintf("xorb %d chunk %d", x, c))
			bld.Add(raw, hash.Chunk(raw))
		}
		body, l := bld.Finish()
		if _, err := svc.PutXorb(ctx, "models/a/up", Prefix, l.Hash, body); err != nil {
			b.Fatal(err)
		}
		layouts = append(layouts, l)
	}
	scope := "models/a/up"
	if other {
		scope = "models/b/other"
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		f := shard.File{}
		var leaves []hash.Leaf
		for _, l := range layouts {
			for c := range l.NumChunks() {
				f.Terms = append(f.Terms, shard.Term{Xorb: l.Hash, RawBytes: l.RawRange(uint32(c), uint32(c+1)), Start: uint32(c), End: uint32(c + 1)})
				f.Verification = append(f.Verification, hash.Verification(l.ChunkHashes[c:c+1]))
				leaves = append(leaves, hash.Leaf{Hash: l.ChunkHashes[c], Size: uint64(l.RawRange(uint32(c), uint32(c+1)))})
			}
		}
		// A different last leaf per iteration: a new file, so nothing is cached between rounds.
		f.Terms = f.Terms[:len(f.Terms)-1-i%2]
		f.Verification = f.Verification[:len(f.Terms)]
		f.Hash = hash.File(leaves[:len(f.Terms)])
		body := (&shard.Shard{Files: []shard.File{f}}).AppendUpload(nil)
		if _, err := svc.RegisterShard(ctx, scope, body, nil); err != nil {
			b.Fatal(err)
		}
	}
}
