package main

import (
	"crypto/sha256"
	"encoding/json"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// TestHashIsNoPossession is issue 9 item 2 against the binary: a writer of scope B that knows
// only the hash of a single-chunk xorb of scope A (from a reconstruction answer or a transfer
// URL) must not be able to register A's file in B, and the origin must not help (dedup answer,
// error texts). The multi-chunk control shows B still dedups legitimately against A's xorbs
// through the dedup route, as a client does, and that B registers the single-chunk file once it
// uploaded the bytes itself.
func TestHashIsNoPossession(t *testing.T) {
	onEachBackend(t, func(t *testing.T, o *proc) {
		o.start(t)
		testHashIsNoPossession(t, o)
	})
}

func testHashIsNoPossession(t *testing.T, o *proc) {
	const scopeA, scopeB = "models/acme/owner", "models/evil/other"
	wA, rA := o.token(t, scopeA, "write"), o.token(t, scopeA, "read")
	wB, rB := o.token(t, scopeB, "write"), o.token(t, scopeB, "read")
	rng := mrand.New(mrand.NewPCG(9, 2))
	one := makeXorb(rng, 1) // a file under 8 KiB: one chunk, one xorb
	multi := makeXorb(rng, 6)
	fOne, fMulti := makeFile(one), makeFile(multi)

	// A uploads both xorbs and registers both files in one shard, as a client does: the
	// dedup entry of either file's first chunk then names both xorbs.
	for _, x := range []xorbUp{one, multi} {
		if st, body := call(t, "POST", o.base()+x.path(), wA, x.body); st != 200 {
			t.Fatalf("A: POST xorb: %d %s", st, body)
		}
	}
	if st, body := call(t, "POST", o.base()+"/v1/shards", wA, joinShards(t, fOne, fMulti)); st != 200 {
		t.Fatalf("A: register: %d %s", st, body)
	}
	checkDownload(t, o.client(t, rA), fOne.hash, fOne.data)

	// What B knows: the reconstruction answer of A's file (logged, or seen before A hid it).
	st, body := call(t, "GET", o.base()+"/v2/reconstructions/"+fOne.hash.String(), rA, nil)
	var rec wire.QueryReconstructionResponseV2
	if err := json.Unmarshal(body, &rec); st != 200 || err != nil || len(rec.Terms) != 1 {
		t.Fatalf("A's reconstruction: %d %v %s", st, err, body)
	}
	leaked := rec.Terms[0]
	size := leaked.UnpackedLength

	t.Run("claim from the hash", func(t *testing.T) {
		// Everything the shard needs follows from the hash: a one-chunk xorb's hash is its
		// chunk hash, the verification hash and the file hash derive from it and the size.
		for _, withBlock := range []bool{false, true} {
			claim := claimShard(leaked.Hash, size, withBlock, nil)
			for _, path := range []string{"/v1/shards", "/v2/shards"} {
				a, err := do("POST", o.base()+path, wB, claim)
				if err != nil {
					t.Fatal(err)
				}
				if shardAccepted(path, a) {
					t.Fatalf("B registered A's file from its xorb hash alone (%s, xorb block %v)", path, withBlock)
				}
				// /v1 answers 400 missing_xorb; /v2 has streamed a progress frame and ends
				// with an error frame carrying the message.
				if !strings.Contains(string(a.body), "missing_xorb") && !strings.Contains(string(a.body), "missing xorb") {
					t.Errorf("%s: refusal %d %s, want a missing xorb", path, a.status, a.body)
				}
			}
		}
		// A SHA-256 the attacker makes up proves nothing either.
		made := hash.FromSHA256(sha256.Sum256(nil))
		if st, body := call(t, "POST", o.base()+"/v1/shards", wB, claimShard(leaked.Hash, size, false, &made)); st != http.StatusBadRequest {
			t.Fatalf("claim with a made-up SHA-256: %d %s", st, body)
		}
		if st, body := call(t, "GET", o.base()+"/v2/reconstructions/"+fOne.hash.String(), rB, nil); st != http.StatusNotFound {
			t.Fatalf("B reads A's file after the claim: %d %s", st, body)
		}
		// The refusal is the very answer a never-stored xorb gets: it does not even confirm
		// that the content is stored.
		fake := hash.Chunk([]byte("never uploaded"))
		_, got := call(t, "POST", o.base()+"/v1/shards", wB, claimShard(leaked.Hash, size, false, nil))
		_, want := call(t, "POST", o.base()+"/v1/shards", wB, claimShard(fake, size, false, nil))
		if strings.ReplaceAll(string(got), leaked.Hash.String(), "H") != strings.ReplaceAll(string(want), fake.String(), "H") {
			t.Errorf("refusal of a stored xorb %s differs from that of an unknown one %s", got, want)
		}
		if st, _ := call(t, "HEAD", o.base()+one.path(), rB, nil); st != http.StatusNotFound {
			t.Errorf("HEAD of A's xorb with B's token: %d, want 404", st)
		}
	})

	t.Run("proof by SHA-256", func(t *testing.T) {
		// A client that dedups against its own cache (hf_xet) references the xorb without
		// uploading it, and proves it holds the bytes with the file's SHA-256 (the shard's
		// metadata extension), which no hash the origin reveals gives away.
		const scopeC = "models/acme/mirror"
		wC, rC := o.token(t, scopeC, "write"), o.token(t, scopeC, "read")
		withSHA := func(sum hash.Hash) []byte {
			sh, err := shard.Parse(fOne.shard)
			if err != nil {
				t.Fatal(err)
			}
			sh.Xorbs = nil
			sh.Files[0].SHA256 = &sum
			return sh.AppendUpload(nil)
		}
		wrong := hash.FromSHA256(sha256.Sum256(append([]byte("not "), fOne.data...)))
		if st, body := call(t, "POST", o.base()+"/v1/shards", wC, withSHA(wrong)); st != http.StatusBadRequest || !strings.Contains(string(body), "missing_xorb") {
			t.Fatalf("a wrong SHA-256: %d %s, want 400 missing_xorb", st, body)
		}
		right := hash.FromSHA256(sha256.Sum256(fOne.data))
		if st, body := call(t, "POST", o.base()+"/v1/shards", wC, withSHA(right)); st != 200 {
			t.Fatalf("the file's SHA-256: %d %s", st, body)
		}
		checkDownload(t, o.client(t, rC), fOne.hash, fOne.data)
	})

	t.Run("public chunk inside a larger xorb", func(t *testing.T) {
		// The same small content also stored inside a xorb of several chunks (uploaded once
		// alone, once packed with other files): its raw chunk hash is public (it is the
		// single-chunk xorb's hash), so a term over exactly that chunk of the larger xorb is
		// derivable from public hashes too.
		const at = 2
		var chunks [][]byte
		for i := range 5 {
			raw := make([]byte, 3000+i)
			if i == at {
				raw = one.chunks[0]
			} else {
				for j := range raw {
					raw[j] = byte(rng.IntN(256))
				}
			}
			chunks = append(chunks, raw)
		}
		packed := packXorb(xorb.LZ4, chunks)
		uploadFile(t, o, wA, makeFile(packed)) // A uploads and registers the packed file
		claim := func(sha *hash.Hash) []byte {
			f := shard.File{
				Hash:         hash.File([]hash.Leaf{{Hash: leaked.Hash, Size: uint64(size)}}),
				Terms:        []shard.Term{{Xorb: packed.hash, RawBytes: size, Start: at, End: at + 1}},
				Verification: []hash.Hash{hash.Verification([]hash.Hash{leaked.Hash})},
				SHA256:       sha,
			}
			return (&shard.Shard{Files: []shard.File{f}}).AppendUpload(nil)
		}
		if st, body := call(t, "POST", o.base()+"/v1/shards", wB, claim(nil)); st != http.StatusBadRequest || !strings.Contains(string(body), "missing_xorb") {
			t.Fatalf("B claimed the public chunk inside A's larger xorb: %d %s", st, body)
		}
		// A holder of the bytes proves it with the file's SHA-256, read from inside the xorb.
		const scopeD = "models/acme/packed-mirror"
		right := hash.FromSHA256(sha256.Sum256(fOne.data))
		if st, body := call(t, "POST", o.base()+"/v1/shards", o.token(t, scopeD, "write"), claim(&right)); st != 200 {
			t.Fatalf("the file's SHA-256 over a range of a larger xorb: %d %s", st, body)
		}
		checkDownload(t, o.client(t, o.token(t, scopeD, "read")), fOne.hash, fOne.data)
	})

	t.Run("dedup answers", func(t *testing.T) {
		ansA := dedupAnswer(t, o, rA, one.hash)
		ansB := dedupAnswer(t, o, rB, one.hash)
		if !hasXorb(ansA, one.hash) || !hasXorb(ansA, multi.hash) {
			t.Errorf("A's dedup answer lacks A's own xorbs: %v", xorbsOf(ansA))
		}
		if hasXorb(ansB, one.hash) {
			t.Errorf("B's dedup answer offers A's single-chunk xorb %s", one.hash)
		}
		if !hasXorb(ansB, multi.hash) {
			t.Errorf("B's dedup answer lacks A's multi-chunk xorb: %v", xorbsOf(ansB))
		}
	})

	t.Run("multi-chunk dedup still works", func(t *testing.T) {
		// B holds the same bytes. Like a client, it asks the dedup route for its first chunk,
		// finds every chunk of its file in the answer (keyed hashes), and registers a shard
		// that references A's xorb without uploading it.
		ans := dedupAnswer(t, o, rB, multi.layout.ChunkHashes[0])
		for i, c := range multi.layout.ChunkHashes {
			if loc, ok := ans.FindChunk(c); !ok || ans.Xorbs[loc.Xorb].Hash != multi.hash || loc.Chunk != i {
				t.Fatalf("chunk %d not found at its place in B's dedup answer", i)
			}
		}
		sh, err := shard.Parse(fMulti.shard)
		if err != nil {
			t.Fatal(err)
		}
		sh.Xorbs = nil // B uploaded no xorb: the file only references A's
		a, err := do("POST", o.base()+"/v2/shards", wB, sh.AppendUpload(nil))
		if err != nil || !shardAccepted("/v2/shards", a) {
			t.Fatalf("B's dedup registration refused: %v %d %s", err, a.status, a.body)
		}
		checkDownload(t, o.client(t, rB), fMulti.hash, fMulti.data)
	})

	t.Run("single-chunk after upload", func(t *testing.T) {
		// What a stock client does when the dedup answer lacks the xorb: upload it. That is
		// the proof of possession; the same claim then registers.
		if st, body := call(t, "POST", o.base()+one.path(), wB, one.body); st != 200 {
			t.Fatalf("B: POST xorb: %d %s", st, body)
		}
		if !hasXorb(dedupAnswer(t, o, rB, one.hash), one.hash) {
			t.Errorf("B's dedup answer lacks the single-chunk xorb B uploaded")
		}
		if st, body := call(t, "POST", o.base()+"/v1/shards", wB, fOne.shard); st != 200 {
			t.Fatalf("B's registration after uploading: %d %s", st, body)
		}
		checkDownload(t, o.client(t, rB), fOne.hash, fOne.data)
	})

	t.Run("errors reveal nothing stored", func(t *testing.T) {
		// Wrong claims about A's multi-chunk xorb: the answers must not carry its stored
		// size or chunk count (issue 9 item 8).
		l := multi.layout
		stored := []string{strconv.Itoa(int(l.RawLen())), strconv.Itoa(int(l.RawRange(0, 2))), " of " + strconv.Itoa(l.NumChunks())}
		block := shard.Xorb{Hash: multi.hash, RawBytes: 1, Chunks: []shard.XorbChunk{{Hash: l.ChunkHashes[0], RawLen: 1}}}
		wrongBlock := &shard.Shard{Xorbs: []shard.Xorb{block}}
		wrongTerm := &shard.Shard{Files: []shard.File{{
			Hash:         hash.Chunk([]byte("claimed")),
			Terms:        []shard.Term{{Xorb: multi.hash, RawBytes: 1, Start: 0, End: 2}},
			Verification: []hash.Hash{hash.Chunk([]byte("v"))},
		}}}
		outOfRange := &shard.Shard{Files: []shard.File{{
			Hash:         hash.Chunk([]byte("claimed")),
			Terms:        []shard.Term{{Xorb: multi.hash, RawBytes: 1, Start: 0, End: 9999}},
			Verification: []hash.Hash{hash.Chunk([]byte("v"))},
		}}}
		// A right term under a wrong file hash: the answer must not give the hash the terms
		// make (without verification entries it would be all a shard needs).
		wrongHash := &shard.Shard{Files: []shard.File{{
			Hash:         hash.Chunk([]byte("claimed")),
			Terms:        []shard.Term{{Xorb: multi.hash, RawBytes: l.RawLen(), Start: 0, End: uint32(l.NumChunks())}},
			Verification: []hash.Hash{hash.Verification(l.ChunkHashes)},
		}}}
		stored = append(stored, fMulti.hash.String())
		for name, sh := range map[string]*shard.Shard{"xorb block": wrongBlock, "term bytes": wrongTerm, "term range": outOfRange, "file hash": wrongHash} {
			st, body := call(t, "POST", o.base()+"/v1/shards", wB, sh.AppendUpload(nil))
			if st != http.StatusBadRequest {
				t.Errorf("%s: status %d, want 400: %s", name, st, body)
			}
			for _, s := range stored {
				if strings.Contains(string(body), s) {
					t.Errorf("%s: answer %s carries the stored %q", name, body, s)
				}
			}
		}
	})
}

// claimShard is the shard a writer builds from a single-chunk xorb's hash and size alone (and
// the SHA-256 it claims for the file, if not nil).
func claimShard(x hash.Hash, size uint32, withBlock bool, sha *hash.Hash) []byte {
	f := shard.File{
		Hash:         hash.File([]hash.Leaf{{Hash: x, Size: uint64(size)}}),
		Terms:        []shard.Term{{Xorb: x, RawBytes: size, Start: 0, End: 1}},
		Verification: []hash.Hash{hash.Verification([]hash.Hash{x})},
		SHA256:       sha,
	}
	sh := &shard.Shard{Files: []shard.File{f}}
	if withBlock {
		sh.Xorbs = []shard.Xorb{{Hash: x, RawBytes: size, Chunks: []shard.XorbChunk{{Hash: x, RawLen: size}}}}
	}
	return sh.AppendUpload(nil)
}

// joinShards returns one upload shard holding the files and xorb blocks of fs.
func joinShards(t *testing.T, fs ...fileUp) []byte {
	t.Helper()
	out := &shard.Shard{}
	for _, f := range fs {
		sh, err := shard.Parse(f.shard)
		if err != nil {
			t.Fatal(err)
		}
		out.Files = append(out.Files, sh.Files...)
		out.Xorbs = append(out.Xorbs, sh.Xorbs...)
	}
	return out.AppendUpload(nil)
}

// dedupAnswer asks the dedup route for chunk with tok and parses the answer; a 404 is an
// answer with no xorbs.
func dedupAnswer(t *testing.T, o *proc, tok string, chunk hash.Hash) *shard.Shard {
	t.Helper()
	st, body := call(t, "GET", o.base()+"/v1/chunks/default/"+chunk.String(), tok, nil)
	switch st {
	case http.StatusNotFound:
		return &shard.Shard{}
	case http.StatusOK:
	default:
		t.Fatalf("dedup %s: %d %s", chunk, st, body)
	}
	sh, err := shard.Parse(body)
	if err != nil {
		t.Fatalf("dedup %s: %v", chunk, err)
	}
	return sh
}

func xorbsOf(sh *shard.Shard) []hash.Hash {
	var out []hash.Hash
	for _, x := range sh.Xorbs {
		out = append(out, x.Hash)
	}
	return out
}

func hasXorb(sh *shard.Shard, h hash.Hash) bool {
	for _, x := range sh.Xorbs {
		if x.Hash == h {
			return true
		}
	}
	return false
}
