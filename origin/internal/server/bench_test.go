package server

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// textChunk fills a 64 KiB chunk with text-like data: words from a small vocabulary.
func textChunk(rng *rand.Rand, n int) []byte {
	words := []string{"tensor", "layer", "weight", "the", "of", "model", "attention", "head", "bias", "0.125", "-1.5e-3", "\n"}
	b := make([]byte, 0, n+16)
	for len(b) < n {
		b = append(b, words[rng.IntN(len(words))]...)
		b = append(b, ' ')
	}
	return b[:n]
}

// BenchmarkXorbIngestHTTP uploads distinct 16 MiB LZ4 xorbs of 64 KiB text-like chunks over
// HTTP, one at a time, into SQLite + local disk and Postgres + MinIO. It reports MB/s, MB per
// CPU-second of this process, and the share of that CPU time spent in validation (decompress,
// hash, merkle: xet_origin_ingest_validation_seconds).
func BenchmarkXorbIngestHTTP(b *testing.B) {
	for _, be := range []backend{sqliteLocal(), postgresMinIO()} {
		b.Run(be.name, func(b *testing.B) { benchIngest(b, be) })
	}
}

func benchIngest(b *testing.B, be backend) {
	e := newEnv(b, be)
	w := e.token("bench", auth.Write)
	const chunks, chunkSize = 256, 64 << 10
	rng := rand.New(rand.NewPCG(1, 1))
	base := make([][]byte, chunks)
	for i := range base {
		base[i] = textChunk(rng, chunkSize)
	}
	build := func(i int) ([]byte, hash.Hash) {
		bl := xorb.NewBuilder(xorb.LZ4)
		for c, raw := range base {
			if c == 0 {
				raw = append(fmt.Appendf(nil, "%08d", i), raw[8:]...) // distinct xorb per upload
			}
			bl.Add(raw, hash.Chunk(raw))
		}
		body, l := bl.Finish()
		return body, l.Hash
	}
	b.SetBytes(chunks * chunkSize)
	var cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		body, h := build(i)
		c0 := testenv.CPUTime()
		b.StartTimer()
		resp := e.do("POST", "/v1/xorbs/default/"+h.String(), w, body)
		read(e.t, resp)
		b.StopTimer()
		cpu += testenv.CPUTime() - c0
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	// CPU of this process (client and origin; not Postgres or MinIO): MB per CPU-second is the
	// per-core rate, robust against other load on the machine.
	b.ReportMetric(float64(b.N*chunks*chunkSize)/1e6/cpu.Seconds(), "MB/cpu-s")
	// Validation alone, on this goroutine, measured in CPU time the same way.
	body, _ := build(b.N)
	c0 := testenv.CPUTime()
	const reps = 3
	for range reps {
		if _, _, err := xorb.Validate(body, xorb.ValidateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	valCPU := (testenv.CPUTime() - c0) / reps
	ingestCPU := cpu / time.Duration(b.N)
	b.ReportMetric(100*valCPU.Seconds()/ingestCPU.Seconds(), "%validation")
}

// BenchmarkReadUploadBody reads a 32 MiB body with a declared length through the ingest
// gate's bodyReader (reserve, grow, copy), as a 32 MiB hf_xet xorb upload arrives; allocated
// bytes per op show how much its growth copies (issue 13).
func BenchmarkReadUploadBody(b *testing.B) {
	e := newEnv(b, sqliteLocal())
	body := make([]byte, 32<<20)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("POST", "/v1/xorbs/default/x", bytes.NewReader(body))
		w := httptest.NewRecorder()
		br := &bodyReader{s: e.srv, mem: e.srv.ingestMu, wait: time.Second}
		got, err := br.read(w, r, 64<<20)
		if err != nil || len(got) != len(body) {
			b.Fatalf("read %d bytes: %v", len(got), err)
		}
		br.release()
	}
}

// BenchmarkDedupMissHandler: one global-dedup miss (GET /v1/chunks/default-merkledb/<hash>,
// 404) through the origin's whole handler (request id, token check, metrics, the route), with
// the index's filter built; the allocations and CPU of what the origin adds per query on top
// of net/http and the kernel (hf_xet sends ~2,000 per upload of small files).
func BenchmarkDedupMissHandler(b *testing.B) {
	e := newEnv(b, sqliteLocal())
	tok := e.token("models/a/b", auth.Read)
	h := e.srv.Handler()
	paths := make([]string, 1024)
	for i := range paths {
		paths[i] = "/v1/chunks/default-merkledb/" + hash.Chunk(fmt.Appendf(nil, "miss %d", i)).String()
	}
	// Wait for the filter, so misses are answered from it as in a running origin.
	f, _ := index.DedupFilterOf(e.srv.idx)
	for deadline := time.Now().Add(10 * time.Second); f != nil && !f.DedupAbsent(hash.Chunk([]byte("x"))); {
		if time.Now().After(deadline) {
			b.Fatal("the dedup filter was not built")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := httptest.NewRequest("GET", paths[i%len(paths)], nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 404 {
			b.Fatalf("answer %d", w.Code)
		}
	}
}
