package main

import (
	"bufio"
	"bytes"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// dedupReads is the number of global-dedup queries that reached the index of the origin whose
// admin listener is at admin (the ones its dedup filter did not answer).
func dedupReads(t *testing.T, admin string) int {
	t.Helper()
	st, body := call(t, "GET", "http://"+admin+"/metrics", "", nil)
	if st != http.StatusOK {
		t.Fatalf("metrics: %d", st)
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "xet_origin_index_call_seconds_count{") && strings.Contains(line, `method="DedupXorbs"`) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			n += int(v)
		}
	}
	return n
}

// TestReplicasDedupFilter runs two xet-origin processes on one PostgreSQL database and one
// MinIO bucket with their dedup filters in use (docs/origin.md, "Dedup filter on Postgres"):
// misses are answered without reaching the index; a file uploaded through A is offered by A's
// dedup route as soon as its shard upload returned and by B's within the bound (not a stale
// 404 from B's filter); a chunk nobody uploaded stays a 404 through both.
func TestReplicasDedupFilter(t *testing.T) {
	bin := buildBinary(t)
	pg, s3 := services(t)
	secret := writeSecret(t, "dedup-filter-secret-"+strings.Repeat("z", 32))
	a := newOrigin(t, bin)
	production(t, a, pg, s3)
	a.args = append(a.args, "--secret-file", secret)
	b := replica(t, a)
	admins := []string{testenv.FreeAddr(t), testenv.FreeAddr(t)}
	a.args = append(a.args, "--admin-listen", admins[0])
	b.args = append(b.args, "--admin-listen", admins[1])
	a.start(t)
	b.start(t)
	origins := []*proc{a, b}

	const scope = "models/acme/dedup-filter"
	w := secretToken(t, bin, secret, scope, "write")
	r := secretToken(t, bin, secret, scope, "read")
	rng := mrand.New(mrand.NewPCG(13, 2))
	random := func() hash.Hash {
		var h hash.Hash
		for i := range h {
			h[i] = byte(rng.IntN(256))
		}
		return h
	}
	// Both filters in use: a miss no longer reaches the index.
	for i, o := range origins {
		if err := eventually(30*time.Second, func() error {
			before := dedupReads(t, admins[i])
			if st, _ := call(t, "GET", o.base()+"/v1/chunks/default/"+random().String(), r, nil); st != http.StatusNotFound {
				return fmt.Errorf("miss: %d", st)
			}
			if after := dedupReads(t, admins[i]); after != before {
				return fmt.Errorf("a miss reached the index (%d → %d)", before, after)
			}
			return nil
		}); err != nil {
			t.Fatalf("origin %d's dedup filter: %v", i, err)
		}
	}

	for round := range 3 {
		f := makeFile(makeXorb(rng, 20))
		chunk := f.xorbs[0].layout.ChunkHashes[0]
		up, other := origins[round%2], origins[1-round%2]
		uploadFile(t, up, w, f)
		if st, _ := call(t, "GET", up.base()+"/v1/chunks/default/"+chunk.String(), r, nil); st != http.StatusOK {
			t.Fatalf("round %d: dedup through the origin that registered the file: %d, want 200 at once", round, st)
		}
		start := time.Now()
		if err := eventually(5*time.Second, func() error {
			if st, _ := call(t, "GET", other.base()+"/v1/chunks/default/"+chunk.String(), r, nil); st != http.StatusOK {
				return fmt.Errorf("%d", st)
			}
			return nil
		}); err != nil {
			t.Fatalf("round %d: dedup through the other origin: %v, want 200 within 5 s", round, err)
		}
		t.Logf("round %d: the other origin offered the file after %v", round, time.Since(start).Round(time.Millisecond))
	}
	for i, o := range origins {
		if st, _ := call(t, "GET", o.base()+"/v1/chunks/default/"+random().String(), r, nil); st != http.StatusNotFound {
			t.Fatalf("origin %d: a chunk nobody uploaded: %d, want 404", i, st)
		}
	}
}
