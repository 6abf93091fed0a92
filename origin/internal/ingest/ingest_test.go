package ingest

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/sqlite"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

func newService(t testing.TB) (*Service, index.Index, objstore.ObjectStore) {
	t.Helper()
	dir := t.TempDir()
	db, err := sqlite.Open(context.Background(), sqlite.Options{Path: filepath.Join(dir, "i.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st, err := objstore.NewLocal(filepath.Join(dir, "o"))
	if err != nil {
		t.Fatal(err)
	}
	return New(Options{Index: db, Objects: st}), db, st
}

// oneXorbFile returns a xorb body, its layout and an upload shard of one file covering it.
func oneXorbFile(t *testing.T) ([]byte, *xorb.Layout, *shard.Shard) {
	t.Helper()
	b := xorb.NewBuilder(xorb.None)
	var leaves []hash.Leaf
	for i := range 5 {
		raw := []byte{byte(i), 1, 2, 3, byte(i)}
		h := hash.Chunk(raw)
		b.Add(raw, h)
		leaves = append(leaves, hash.Leaf{Hash: h, Size: 5})
	}
	body, l := b.Finish()
	x := shard.Xorb{Hash: l.Hash, RawBytes: l.RawLen()}
	for i, h := range l.ChunkHashes {
		x.Chunks = append(x.Chunks, shard.XorbChunk{Hash: h, RawStart: uint32(5 * i), RawLen: 5})
	}
	s := &shard.Shard{
		Files: []shard.File{{Hash: hash.File(leaves), Terms: []shard.Term{{Xorb: l.Hash, RawBytes: 25, Start: 0, End: 5}},
			Verification: []hash.Hash{hash.Verification(l.ChunkHashes)}}},
		Xorbs: []shard.Xorb{x},
	}
	return body, l, s
}

func TestPutXorb(t *testing.T) {
	svc, db, st := newService(t)
	body, l, _ := oneXorbFile(t)
	ctx := context.Background()
	if _, err := svc.PutXorb(ctx, "models/acme/a", "other", l.Hash, body); !errors.Is(err, ErrBadPrefix) {
		t.Fatalf("bad prefix: %v", err)
	}
	if _, err := svc.PutXorb(ctx, "models/acme/a", Prefix, hash.Chunk([]byte("x")), body); !errors.Is(err, xorb.ErrHashMismatch) {
		t.Fatalf("mismatch: %v", err)
	}
	if _, err := st.Stat(ctx, XorbKey(l.Hash)); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("rejected xorb stored: %v", err)
	}
	if held, err := db.Possessed(ctx, "models/acme/a", []hash.Hash{l.Hash}); err != nil || len(held) != 0 {
		t.Fatalf("a rejected upload recorded possession: %v %v", held, err)
	}
	for i, want := range []bool{true, false} {
		ins, err := svc.PutXorb(ctx, "models/acme/a", Prefix, l.Hash, body)
		if err != nil || ins != want {
			t.Fatalf("put %d: inserted %v, %v", i, ins, err)
		}
	}
	// Possession is recorded for the new upload and for the one that found the xorb stored.
	if _, err := svc.PutXorb(ctx, "models/acme/b", Prefix, l.Hash, body); err != nil {
		t.Fatal(err)
	}
	for _, scope := range []string{"models/acme/a", "models/acme/b"} {
		if held, err := db.Possessed(ctx, scope, []hash.Hash{l.Hash}); err != nil || !held[l.Hash] {
			t.Fatalf("possession of %s: %v %v", scope, held, err)
		}
	}
	size, err := db.XorbSize(ctx, l.Hash)
	if err != nil || size != uint64(len(body)+xorb.FooterLen(5)+4) {
		t.Fatalf("stored size %d, %v", size, err)
	}
	rc, n, err := st.Get(ctx, XorbKey(l.Hash))
	if err != nil || uint64(n) != size {
		t.Fatalf("object: %d bytes, %v", n, err)
	}
	rc.Close()
}

func TestRegisterShardProgress(t *testing.T) {
	svc, db, st := newService(t)
	body, l, s := oneXorbFile(t)
	ctx := context.Background()
	if _, err := svc.PutXorb(ctx, "models/acme/a", Prefix, l.Hash, body); err != nil {
		t.Fatal(err)
	}
	big := *s
	big.Files = append(big.Files, s.Files[0])
	big.Files[1].SHA256 = &l.Hash // another shard body, same file
	tests := []struct {
		name      string
		svc       *Service
		shard     *shard.Shard
		wantStage []string
		inline    bool // body kept in the index, nothing in the object store
	}{
		{"inline", svc, s, []string{StageValidating, StageValidating, StageSyncing}, true},
		{"object store", New(Options{Index: db, Objects: st, MaxInlineShard: -1}), &big,
			[]string{StageValidating, StageValidating, StageUploading, StageSyncing}, false},
	}
	for _, tc := range tests {
		up := tc.shard.AppendUpload(nil)
		h := hash.Chunk(up)
		var stages []string
		ins, err := tc.svc.RegisterShard(ctx, "scope", up, func(p Progress) { stages = append(stages, p.Stage) })
		if err != nil || !ins {
			t.Fatalf("%s: register: %v %v", tc.name, ins, err)
		}
		if !slices.Equal(stages, tc.wantStage) {
			t.Fatalf("%s: stages %v, want %v", tc.name, stages, tc.wantStage)
		}
		if _, err := db.File(ctx, s.Files[0].Hash, "scope"); err != nil {
			t.Fatal(err)
		}
		inline, err := db.(index.ShardBodies).ShardBody(ctx, h)
		if err != nil {
			t.Fatalf("%s: ShardBody: %v", tc.name, err)
		}
		_, statErr := st.Stat(ctx, ShardKey(h))
		if tc.inline {
			if !bytes.Equal(inline, up) || !errors.Is(statErr, objstore.ErrNotFound) {
				t.Fatalf("%s: inline body of %d bytes (want %d), object: %v", tc.name, len(inline), len(up), statErr)
			}
		} else if inline != nil || statErr != nil {
			t.Fatalf("%s: inline body of %d bytes (want none), object: %v", tc.name, len(inline), statErr)
		}
	}
	// A chunk-reference bomb: few bytes, many chunks claimed.
	small := New(Options{Index: db, Objects: nil, MaxChunkRefs: 4})
	if _, err := small.RegisterShard(ctx, "scope", s.AppendUpload(nil), nil); !errors.Is(err, shard.ErrTooLarge) {
		t.Fatalf("chunk-reference limit: %v", err)
	}
}

// TestRegisterShardCheckOrder: registration first checks a shard as if its scope possessed every
// xorb it references (the index then requires that), but a shard that fails that check gets the
// full check's answer, possession first. Here a writer of scope B claims a single-chunk xorb of
// scope A with a range past its one chunk: the answer must be the missing xorb (as if it were not
// stored), not the bad range, which would tell B that a xorb with that hash exists.
func TestRegisterShardCheckOrder(t *testing.T) {
	svc, db, _ := newService(t)
	ctx := context.Background()
	b := xorb.NewBuilder(xorb.None)
	raw := []byte("one chunk of scope A")
	b.Add(raw, hash.Chunk(raw))
	body, l := b.Finish()
	if _, err := svc.PutXorb(ctx, "models/acme/a", Prefix, l.Hash, body); err != nil {
		t.Fatal(err)
	}
	leaves := []hash.Leaf{{Hash: l.ChunkHashes[0], Size: uint64(len(raw))}}
	s := &shard.Shard{Files: []shard.File{{Hash: hash.File(leaves),
		Terms:        []shard.Term{{Xorb: l.Hash, RawBytes: uint32(len(raw)), Start: 0, End: 2}},
		Verification: []hash.Hash{hash.Verification(l.ChunkHashes)}}}}
	_, err := svc.RegisterShard(ctx, "models/acme/b", s.AppendUpload(nil), nil)
	if !errors.Is(err, ErrMissingXorb) {
		t.Fatalf("claim of a single-chunk xorb of another scope, bad range: %v, want ErrMissingXorb", err)
	}
	if _, err := db.File(ctx, s.Files[0].Hash, "models/acme/b"); !errors.Is(err, index.ErrNotFound) {
		t.Fatalf("refused file visible: %v", err)
	}
}
