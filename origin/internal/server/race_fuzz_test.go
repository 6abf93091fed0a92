package server

import (
	"bytes"
	"io"
	"math/bits"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// raceSchemes are the encodings a fuzz input picks its racing clients from.
var raceSchemes = []xorb.Scheme{xorb.None, xorb.LZ4, xorb.ByteGrouping4LZ4, xorb.Auto}

// post sends an authorized POST from any goroutine (env.do may fail the test, which only the
// test's goroutine may) and returns the status and body; status 0 is a transport error.
func (e *env) post(path, tok string, body []byte) (int, []byte) {
	req, err := http.NewRequest("POST", e.ts.URL+path, bytes.NewReader(body))
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, []byte(err.Error())
	}
	return resp.StatusCode, b
}

// FuzzShardRegistrationRace drives the shard registration route of a real origin (SQLite index,
// local store) while clients upload one xorb in several encodings at the same moment. The input
// picks the chunks, the racing encodings, the chunk range the file covers, whether the shard is
// sent with the xorbs or after them, and a byte of the shard to corrupt. Invariant: every xorb
// upload succeeds; the registration either fails with a 4xx leaving nothing registered, or
// succeeds and every file it registered downloads byte-exact; and after a failure the intact
// shard registers and downloads byte-exact.
func FuzzShardRegistrationRace(f *testing.F) {
	f.Add(uint64(1), uint8(0b0011), uint8(8), uint8(0), uint8(255), false, uint16(0), uint8(0))
	f.Add(uint64(2), uint8(0b0111), uint8(20), uint8(3), uint8(9), false, uint16(0), uint8(0))
	f.Add(uint64(3), uint8(0b1110), uint8(31), uint8(0), uint8(255), true, uint16(0), uint8(0))
	f.Add(uint64(4), uint8(0b1001), uint8(1), uint8(0), uint8(0), true, uint16(0), uint8(0))
	f.Add(uint64(5), uint8(0b0101), uint8(12), uint8(2), uint8(4), false, uint16(40), uint8(0x01))
	f.Add(uint64(6), uint8(0b1111), uint8(16), uint8(0), uint8(255), false, uint16(300), uint8(0x80))
	f.Add(uint64(7), uint8(0b0110), uint8(5), uint8(1), uint8(1), true, uint16(9), uint8(0xff))
	f.Fuzz(func(t *testing.T, seed uint64, mix, nChunks, start, span uint8, together bool, flipAt uint16, flip uint8) {
		e := newEnv(t, sqliteLocal())
		const scope = "models/fuzz/race"
		w, r := e.token(scope, auth.Write), e.token(scope, auth.Read)

		var schemes []xorb.Scheme
		for i, s := range raceSchemes {
			if mix&(1<<i) != 0 {
				schemes = append(schemes, s)
			}
		}
		if bits.OnesCount8(mix&0x0f) < 2 {
			schemes = []xorb.Scheme{xorb.None, xorb.LZ4}
		}
		n := 1 + int(nChunks)%32
		rng := rand.New(rand.NewPCG(seed, 77))
		chunks := make([][]byte, n)
		for i := range chunks {
			raw := make([]byte, 300+rng.IntN(2500))
			for j := range raw {
				if i%4 == 3 {
					raw[j] = byte(rng.Uint32()) // noise: stored raw by every scheme
				} else {
					raw[j] = byte('a' + rng.IntN(2+i%5))
				}
			}
			chunks[i] = raw
		}
		bodies := make([][]byte, len(schemes))
		var l *xorb.Layout
		for i, s := range schemes {
			b := xorb.NewBuilder(s)
			for _, raw := range chunks {
				b.Add(raw, hash.Chunk(raw))
			}
			bodies[i], l = b.Finish()
		}

		// One file over chunks [a, b) of the xorb.
		a := int(start) % n
		b := a + 1 + int(span)%(n-a)
		var data []byte
		var leaves []hash.Leaf
		for _, raw := range chunks[a:b] {
			data = append(data, raw...)
			leaves = append(leaves, hash.Leaf{Hash: hash.Chunk(raw), Size: uint64(len(raw))})
		}
		file := shard.File{Hash: hash.File(leaves),
			Terms:        []shard.Term{{Xorb: l.Hash, RawBytes: uint32(len(data)), Start: uint32(a), End: uint32(b)}},
			Verification: []hash.Hash{hash.Verification(l.ChunkHashes[a:b])}}
		intact := (&shard.Shard{Files: []shard.File{file}, Xorbs: []shard.Xorb{xorbBlock(l)}}).AppendUpload(nil)
		sent := intact
		if flip != 0 {
			sent = bytes.Clone(intact)
			sent[int(flipAt)%len(sent)] ^= flip
		}

		// The racing uploads, and the shard with them or after them.
		var wg sync.WaitGroup
		status := make([]int, len(bodies))
		answers := make([][]byte, len(bodies))
		go1 := make(chan struct{})
		for i := range bodies {
			wg.Go(func() {
				<-go1
				status[i], answers[i] = e.post("/v1/xorbs/default/"+l.Hash.String(), w, bodies[i])
			})
		}
		var shardStatus int
		var shardAnswer []byte
		if together {
			wg.Go(func() {
				<-go1
				shardStatus, shardAnswer = e.post("/v1/shards", w, sent)
			})
		}
		close(go1)
		wg.Wait()
		for i := range bodies {
			if status[i] != http.StatusOK {
				t.Fatalf("%v upload: %d %s", schemes[i], status[i], answers[i])
			}
		}
		if !together {
			shardStatus, shardAnswer = e.post("/v1/shards", w, sent)
		}

		switch {
		case shardStatus == http.StatusOK:
			// Whatever it registered (a corrupted shard may still be a valid one) downloads
			// as the chunks its terms name.
			parsed, err := shard.Parse(sent)
			if err != nil {
				t.Fatalf("registered a shard that does not parse: %v", err)
			}
			for _, pf := range parsed.Files {
				var want []byte
				for _, term := range pf.Terms {
					if term.Xorb != l.Hash {
						t.Fatalf("registered a term of unknown xorb %s", term.Xorb)
					}
					for _, raw := range chunks[term.Start:term.End] {
						want = append(want, raw...)
					}
				}
				if got := e.reconstructV2(pf.Hash, r, ""); !bytes.Equal(got, want) {
					t.Fatalf("file %s: %d bytes downloaded differ from the %d registered", pf.Hash, len(got), len(want))
				}
			}
			if flip == 0 && len(parsed.Files) != 1 {
				t.Fatalf("intact shard registered %d files", len(parsed.Files))
			}
		case shardStatus >= 400 && shardStatus < 500:
			if flip == 0 && !together {
				t.Fatalf("intact shard after its xorbs: %d %s", shardStatus, shardAnswer)
			}
			// Nothing of it is registered.
			gone := []hash.Hash{file.Hash}
			if parsed, err := shard.Parse(sent); err == nil {
				for _, pf := range parsed.Files {
					gone = append(gone, pf.Hash)
				}
			}
			for _, h := range gone {
				expect(t, e.do("GET", "/v2/reconstructions/"+h.String(), r, nil), http.StatusNotFound)
			}
			// The intact shard registers now, and the file downloads.
			if st, ans := e.post("/v1/shards", w, intact); st != http.StatusOK {
				t.Fatalf("intact shard after a failed one: %d %s", st, ans)
			}
			if got := e.reconstructV2(file.Hash, r, ""); !bytes.Equal(got, data) {
				t.Fatalf("file: %d bytes downloaded differ from the %d uploaded", len(got), len(data))
			}
		default:
			t.Fatalf("shard: %d %s, want 200 or a 4xx", shardStatus, shardAnswer)
		}
	})
}
