package main

import (
	"bytes"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"sync"
	"testing"

	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// makeXorbEncodings builds one xorb of n chunks once per scheme: the same chunks, so the same
// xorb hash, in different encodings, as clients that compress differently send it. Chunks
// alternate between compressible text and incompressible noise (stored raw by every scheme),
// so the encodings differ in the offsets of every later chunk.
func makeXorbEncodings(rng *mrand.Rand, n int, schemes []xorb.Scheme) []xorbUp {
	var chunks [][]byte
	for i := range n {
		raw := make([]byte, 6000+rng.IntN(4000))
		if i%5 == 4 {
			for j := range raw {
				raw[j] = byte(rng.Uint32())
			}
		} else {
			for j := range raw {
				raw[j] = byte('a' + rng.IntN(3+i%4))
			}
		}
		chunks = append(chunks, raw)
	}
	ups := make([]xorbUp, len(schemes))
	for i, s := range schemes {
		ups[i] = packXorb(s, chunks)
	}
	return ups
}

// clientMixes are the sets of clients that upload one xorb at the same moment: two or three
// of uncompressed, LZ4, byte-grouped LZ4 and the upstream client's per-run choice.
var clientMixes = [][]xorb.Scheme{
	{xorb.None, xorb.LZ4},
	{xorb.LZ4, xorb.ByteGrouping4LZ4},
	{xorb.None, xorb.ByteGrouping4LZ4},
	{xorb.None, xorb.LZ4, xorb.ByteGrouping4LZ4},
	{xorb.Auto, xorb.None, xorb.LZ4},
	{xorb.ByteGrouping4LZ4, xorb.None, xorb.ByteGrouping4LZ4, xorb.LZ4},
}

// TestXorbEncodingRace is issue 9's first attack, on the real binary: concurrent uploads of one
// xorb in different encodings (the hash covers the chunks, not their compression), then a file
// registered over it, which must download byte-exact. Before xorb objects were create-only the
// index kept one upload's layout while the store kept another's bytes, and the file could never
// be downloaded again. Each round is one xorb raced by a client mix; rounds run four at a time.
func TestXorbEncodingRace(t *testing.T) {
	onEachBackend(t, func(t *testing.T, o *proc) {
		o.start(t)
		const scope = "models/race/encodings"
		w, r := o.token(t, scope, "write"), o.token(t, scope, "read")
		c := o.client(t, r)
		const rounds, parallel = 60, 4
		sem := make(chan struct{}, parallel)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failures []string
		fail := func(format string, args ...any) {
			mu.Lock()
			failures = append(failures, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		for round := range rounds {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				rng := mrand.New(mrand.NewPCG(uint64(round), 9))
				mix := clientMixes[round%len(clientMixes)]
				ups := makeXorbEncodings(rng, 40+rng.IntN(30), mix)
				// Every client sends its encoding at the same moment.
				start := make(chan struct{})
				answers := make([]answer, len(ups))
				errs := make([]error, len(ups))
				var posts sync.WaitGroup
				for i, x := range ups {
					posts.Go(func() {
						<-start
						answers[i], errs[i] = do("POST", o.base()+x.path(), w, x.body)
					})
				}
				close(start)
				posts.Wait()
				for i := range ups {
					if errs[i] != nil || answers[i].status != http.StatusOK {
						fail("round %d: %v upload: %v %d %s", round, mix[i], errs[i], answers[i].status, answers[i].body)
						return
					}
				}
				// Each client then registers its file over the xorb (the same file).
				f := makeFile(ups[round%len(ups)])
				path := []string{"/v1/shards", "/v2/shards"}[round%2]
				if a, err := do("POST", o.base()+path, w, f.shard); err != nil || !shardAccepted(path, a) {
					fail("round %d: shard: %v %d %s", round, err, a.status, a.body)
					return
				}
				got, err := download(c, f.hash)
				if err != nil {
					fail("round %d (%v): download: %v", round, mix, err)
					return
				}
				if !bytes.Equal(got, f.data) {
					fail("round %d (%v): download: %d bytes differ from the %d uploaded", round, mix, len(got), len(f.data))
				}
			})
		}
		wg.Wait()
		if len(failures) > 0 {
			t.Fatalf("%d of %d rounds failed; first: %s", len(failures), rounds, failures[0])
		}
	})
}
