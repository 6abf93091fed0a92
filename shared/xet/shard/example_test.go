package shard_test

import (
	"fmt"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
)

// helloUpload returns the upload body hf_xet sends for the 11-byte file "hello world".
func helloUpload() []byte {
	data := []byte("hello world")
	leaf := hash.Leaf{Hash: hash.Chunk(data), Size: uint64(len(data))}
	s := &shard.Shard{
		Files: []shard.File{{
			Hash:         hash.File([]hash.Leaf{leaf}),
			Terms:        []shard.Term{{Xorb: leaf.Hash, RawBytes: 11, Start: 0, End: 1}},
			Verification: []hash.Hash{hash.Verification([]hash.Hash{leaf.Hash})},
		}},
		Xorbs: []shard.Xorb{{
			Hash:     leaf.Hash, // a one-chunk xorb's hash is its chunk's hash
			RawBytes: 11,
			Chunks:   []shard.XorbChunk{{Hash: leaf.Hash, RawStart: 0, RawLen: 11}},
		}},
	}
	return s.AppendUpload(nil)
}

func ExampleParse() {
	s, err := shard.Parse(helloUpload())
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range s.Files {
		fmt.Printf("file %v: %d bytes in %d term(s), verified=%v\n", f.Hash, f.Size(), len(f.Terms), f.Verification != nil)
	}
	for _, x := range s.Xorbs {
		fmt.Printf("new xorb %v: %d chunk(s)\n", x.Hash, len(x.Chunks))
	}

	_, err = shard.Parse(helloUpload()[:100])
	fmt.Println(err)
	// Output:
	// file f15edd43b7e85cfd25e2758ffe13b99fdd09dfa817e8d9f6548722a7a126db7f: 11 bytes in 1 term(s), verified=true
	// new xorb 4e39378b9d359f118190557a1f44130219a54e5fcfa07bd96cf50b466fe651b1: 1 chunk(s)
	// shard: corrupt: file 0: 1 terms need 3 records, 1 remain (offset 48)
}

// An origin registers an upload, later answers a dedup query for one of its chunks with a keyed
// shard, and a client finds its raw chunk hash in that answer.
func ExampleDedupAnswer() {
	up, _ := shard.Parse(helloUpload())
	eligible := shard.EligibleChunks(up) // index these: chunk hash -> this shard's xorbs
	fmt.Println("eligible:", eligible)

	key := hash.Chunk([]byte("per-answer key")) // any non-zero 32 bytes
	now := time.Unix(1756489133, 0)
	shard.MarkFileStarts(up)
	body := shard.DedupAnswer(up.Xorbs, key, now, now.Add(7*24*time.Hour)).AppendWithFooter(nil)

	// Client side.
	ans, _ := shard.Parse(body)
	loc, ok := ans.FindChunk(eligible[0])
	c := ans.Xorbs[loc.Xorb].Chunks[loc.Chunk]
	fmt.Println("found:", ok, "xorb", ans.Xorbs[loc.Xorb].Hash, "bytes", c.RawStart, c.RawLen)
	fmt.Println("raw hash disclosed:", c.Hash == eligible[0])
	fmt.Println("expired a week later:", ans.Footer.Expired(now.Add(7*24*time.Hour)))
	// Output:
	// eligible: [4e39378b9d359f118190557a1f44130219a54e5fcfa07bd96cf50b466fe651b1]
	// found: true xorb 4e39378b9d359f118190557a1f44130219a54e5fcfa07bd96cf50b466fe651b1 bytes 0 11
	// raw hash disclosed: false
	// expired a week later: true
}
