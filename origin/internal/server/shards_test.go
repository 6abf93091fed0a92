package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/config"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/ingest"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
)

// mutated returns the fixture's shard body after fn changed a copy of the shard.
func mutated(t *testing.T, f *fixture, fn func(s *shard.Shard)) []byte {
	t.Helper()
	s, err := shard.Parse(f.body)
	if err != nil {
		t.Fatal(err)
	}
	fn(s)
	return s.AppendUpload(nil)
}

func uploadXorbs(e *env, f *fixture, tok string) {
	e.t.Helper()
	for i, body := range f.xorbs {
		expect(e.t, e.do("POST", "/v1/xorbs/default/"+f.layouts[i].Hash.String(), tok, body), 200)
	}
}

func result(t *testing.T, b []byte) int {
	t.Helper()
	var r struct{ Result *int }
	if err := json.Unmarshal(b, &r); err != nil || r.Result == nil {
		t.Fatalf("shard answer %q: %v", b, err)
	}
	return *r.Result
}

func TestShardUploadV1(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			e := newEnv(t, b)
			f := makeFixture(t, 10, 2, 10, 2000)
			w := e.token("models/acme/a", auth.Write)
			uploadXorbs(e, f, w)
			if r := result(t, expect(t, e.do("POST", "/v1/shards", w, f.body), 200)); r != 1 {
				t.Fatalf("first registration result %d", r)
			}
			if r := result(t, expect(t, e.do("POST", "/v1/shards", w, f.body), 200)); r != 0 {
				t.Fatalf("second registration result %d", r)
			}
			resp := e.do("HEAD", "/v1/files/"+f.file.String(), e.token("models/acme/a", auth.Read), nil)
			expect(t, resp, 200)
			if resp.Header.Get("Content-Length") != strconv.Itoa(len(f.data)) {
				t.Fatalf("HEAD file: Content-Length %s, want %d", resp.Header.Get("Content-Length"), len(f.data))
			}
			expect(t, e.do("HEAD", "/v1/files/"+f.file.String(), e.token("models/acme/other", auth.Read), nil), 404)
			// The same shard under a second scope makes the file visible there too.
			w2 := e.token("models/acme/other", auth.Write)
			expect(t, e.do("POST", "/v1/shards", w2, f.body), 200)
			expect(t, e.do("HEAD", "/v1/files/"+f.file.String(), e.token("models/acme/other", auth.Read), nil), 200)
		})
	}
}

func TestShardUploadRejects(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { testShardUploadRejects(t, b) })
	}
}

func testShardUploadRejects(t *testing.T, b backend) {
	e := newEnv(t, b)
	f := makeFixture(t, 11, 2, 10, 2000)
	missing := makeFixture(t, 12, 1, 4, 2000) // its xorb is never uploaded
	scope := "models/acme/r"
	w := e.token(scope, auth.Write)
	uploadXorbs(e, f, w)
	tests := []struct {
		name   string
		token  string
		body   []byte
		status int
	}{
		{"no token", "", f.body, 401},
		{"read token", e.token(scope, auth.Read), f.body, 403},
		{"garbage", w, []byte("not a shard at all, certainly not"), 400},
		{"truncated", w, f.body[:len(f.body)-20], 400},
		{"missing xorb", w, missing.body, 400},
		{"term references missing xorb", w, mutated(t, f, func(s *shard.Shard) {
			s.Files[0].Terms[0].Xorb = missing.layouts[0].Hash
		}), 400},
		{"wrong verification hash", w, mutated(t, f, func(s *shard.Shard) {
			s.Files[0].Verification[1][0] ^= 1
		}), 400},
		{"no verification", w, mutated(t, f, func(s *shard.Shard) { s.Files[0].Verification = nil }), 400},
		{"wrong unpacked bytes", w, mutated(t, f, func(s *shard.Shard) { s.Files[0].Terms[0].RawBytes++ }), 400},
		{"range past the xorb", w, mutated(t, f, func(s *shard.Shard) { s.Files[0].Terms[1].End++ }), 400},
		{"empty range", w, mutated(t, f, func(s *shard.Shard) { s.Files[0].Terms[1].Start = s.Files[0].Terms[1].End }), 400},
		{"wrong file hash", w, mutated(t, f, func(s *shard.Shard) { s.Files[0].Hash[3] ^= 1 }), 400},
		{"xorb block lies about a size", w, mutated(t, f, func(s *shard.Shard) { s.Xorbs[0].Chunks[2].RawLen++ }), 400},
		{"xorb block lies about a hash", w, mutated(t, f, func(s *shard.Shard) { s.Xorbs[1].Chunks[0].Hash[0] ^= 1 }), 400},
		{"xorb block misses chunks", w, mutated(t, f, func(s *shard.Shard) { s.Xorbs[0].Chunks = s.Xorbs[0].Chunks[:3] }), 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/shards", "/v2/shards"} {
				resp := e.do("POST", path, tc.token, tc.body)
				early := tc.name == "garbage" || tc.name == "truncated" || tc.name == "no verification"
				if path == "/v2/shards" && resp.StatusCode == 200 && early {
					t.Fatal("v2 streamed for a body rejected before any work: want a plain 4xx")
				}
				if path == "/v2/shards" && resp.StatusCode == 200 {
					frames := readFrames(t, resp)
					last := frames[len(frames)-1]
					if last.Type != "error" || last.Retryable == nil || *last.Retryable {
						t.Fatalf("v2: last frame %+v, want a non-retryable error", last)
					}
					continue
				}
				expect(t, resp, tc.status)
			}
		})
	}
	// Nothing was registered.
	if _, err := e.idx.File(context.Background(), f.file, scope); err == nil {
		t.Fatal("a rejected shard registered its file")
	}
	for _, tc := range tests {
		if e.stored(ingest.ShardKey(hash.Chunk(tc.body))) {
			t.Fatalf("rejected shard %q left an object", tc.name)
		}
	}
	status, body := e.rawRequest("POST", "/v1/shards", w, shard.MaxSize+1, nil)
	if !strings.HasPrefix(status, "413") || !strings.Contains(body, "too_large") {
		t.Fatalf("oversized shard: %s %s", status, body)
	}
}

// frame decodes any /v2/shards frame, with pointers to tell absent fields from zero ones.
type frame struct {
	Type      string  `json:"type"`
	Verified  *uint64 `json:"verified"`
	Total     *uint64 `json:"total"`
	Stage     string  `json:"stage"`
	Result    *int    `json:"result"`
	Message   string  `json:"message"`
	Retryable *bool   `json:"retryable"`
}

// readFrames reads an NDJSON answer to its end; every line must be a known frame and the last
// one terminal.
func readFrames(t *testing.T, resp *http.Response) []frame {
	t.Helper()
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("content type %q", ct)
	}
	var out []frame
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var f frame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("frame %q: %v", sc.Bytes(), err)
		}
		switch f.Type {
		case "validating", "committing", "result", "error":
		default:
			t.Fatalf("unknown frame type in %q", sc.Bytes())
		}
		out = append(out, f)
	}
	if len(out) == 0 || (out[len(out)-1].Type != "result" && out[len(out)-1].Type != "error") {
		t.Fatalf("stream without a terminal frame: %+v", out)
	}
	return out
}

func TestShardUploadV2(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			e := newEnv(t, b)
			f := makeFixture(t, 13, 3, 5, 1000)
			w := e.token("datasets/x/y", auth.Write)
			uploadXorbs(e, f, w)
			resp := e.do("POST", "/v2/shards", w, f.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			frames := readFrames(t, resp)
			last := frames[len(frames)-1]
			if last.Type != "result" || last.Result == nil || *last.Result != 1 {
				t.Fatalf("frames %+v", frames)
			}
			// Progress frames may be skipped (only the latest is sent), but they come in stage
			// order and validating frames count the shard's 3 terms.
			order := map[string]int{"validating": 0, "committing": 1, "result": 2}
			for i, fr := range frames {
				if i > 0 && order[fr.Type] < order[frames[i-1].Type] {
					t.Fatalf("frames out of order: %+v", frames)
				}
				if fr.Type == "validating" && (fr.Total == nil || *fr.Total != 3) {
					t.Fatalf("validating frame %+v", fr)
				}
			}
			frames = readFrames(t, e.do("POST", "/v2/shards", w, f.body))
			if r := frames[len(frames)-1].Result; r == nil || *r != 0 {
				t.Fatalf("re-upload frames %+v", frames)
			}
			expect(t, e.do("HEAD", "/v1/files/"+f.file.String(), e.token("datasets/x/y", auth.Read), nil), 200)
		})
	}
}

// gatedIndex holds RegisterShard until release is closed.
type gatedIndex struct {
	index.Index
	entered chan struct{}
	release chan struct{}
}

func (g *gatedIndex) RegisterShard(ctx context.Context, r *index.Registration) (bool, error) {
	close(g.entered)
	<-g.release
	return g.Index.RegisterShard(ctx, r)
}

func TestShardUploadV2Heartbeat(t *testing.T) {
	idx, objs := sqliteLocal().open(t)
	g := &gatedIndex{Index: idx, entered: make(chan struct{}), release: make(chan struct{})}
	e := newEnvWith(t, g, objs, func(c *config.Config) { c.Limits.ShardHeartbeat = config.Duration(5 * time.Millisecond) })
	f := makeFixture(t, 14, 1, 5, 1000)
	w := e.token("s", auth.Write)
	uploadXorbs(e, f, w)
	resp := e.do("POST", "/v2/shards", w, f.body)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	// While the commit is held, the last frame ("committing syncing") must come again and again.
	repeats := 0
	var prev string
	for repeats < 3 && sc.Scan() {
		line := sc.Text()
		if line == prev && strings.Contains(line, "syncing") {
			repeats++
		}
		prev = line
	}
	if repeats < 3 {
		t.Fatalf("no heartbeat: last line %q, err %v", prev, sc.Err())
	}
	close(g.release)
	var last string
	for sc.Scan() {
		last = sc.Text()
	}
	if last != `{"type":"result","result":1}` {
		t.Fatalf("final frame %q", last)
	}
}

func TestConcurrentIdenticalUploads(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			e := newEnv(t, b)
			f := makeFixture(t, 15, 1, 30, 2000)
			w := e.token("s", auth.Write)
			const n = 8
			var wg sync.WaitGroup
			xorbIns := make([]bool, n)
			shardRes := make([]int, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp := e.do("POST", "/v1/xorbs/default/"+f.layouts[0].Hash.String(), w, f.xorbs[0])
					var r struct {
						WasInserted bool `json:"was_inserted"`
					}
					b := read(t, resp)
					if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil {
						t.Errorf("xorb upload %d: %d %s", i, resp.StatusCode, b)
					}
					xorbIns[i] = r.WasInserted
				}()
			}
			wg.Wait()
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp := e.do("POST", "/v1/shards", w, f.body)
					b := read(t, resp)
					if resp.StatusCode != 200 {
						t.Errorf("shard upload %d: %d %s", i, resp.StatusCode, b)
						return
					}
					shardRes[i] = result(t, b)
				}()
			}
			wg.Wait()
			if c := count(xorbIns, true); c != 1 {
				t.Errorf("%d uploads report inserting the xorb", c)
			}
			ones := 0
			for _, r := range shardRes {
				ones += r
			}
			if ones != 1 {
				t.Errorf("%d uploads report registering the shard", ones)
			}
			expect(t, e.do("HEAD", "/v1/files/"+f.file.String(), e.token("s", auth.Read), nil), 200)
		})
	}
}

func count[T comparable](xs []T, v T) int {
	n := 0
	for _, x := range xs {
		if x == v {
			n++
		}
	}
	return n
}

func TestShardUploadSlow(t *testing.T) {
	e := newEnv(t, sqliteLocal(), withPace(1<<20, 50*time.Millisecond))
	f := makeFixture(t, 16, 1, 4, 1000)
	w := e.token("s", auth.Write)
	uploadXorbs(e, f, w)
	for _, path := range []string{"/v1/shards", "/v2/shards"} {
		status, body := e.rawRequest("POST", path, w, int64(len(f.body)), f.body[:len(f.body)/2])
		if !strings.HasPrefix(status, "408") || !strings.Contains(body, "too_slow") {
			t.Fatalf("%s: %s %s", path, status, body)
		}
	}
	expect(t, e.do("HEAD", "/v1/files/"+f.file.String(), e.token("s", auth.Read), nil), 404)
}
