package xetclient_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// fakeCAS is a hand-written, in-memory CAS that implements just enough of the protocol to test
// the client: xorb and shard uploads (validated strictly: xorb hashes, file hashes, verification
// hashes), v1/v2 reconstructions planned with package recon, the global dedup route with an
// HMAC key, and a transfer route serving single byte ranges of stored xorbs. Knobs inject the
// failures the client must survive. It is safe for concurrent use.
type fakeCAS struct {
	t     testing.TB
	token string // required bearer token ("" = no auth)
	base  string // set once the server listens; used in signed URLs

	// knobs (set before use)
	noV2Recon  bool // /v2/reconstructions → 404
	noV2Shards bool // /v2/shards → 404
	hmacKey    hash.Hash
	noDedup    bool

	mu        sync.Mutex
	xorbs     map[hash.Hash][]byte
	layouts   map[hash.Hash]*xorb.Layout
	files     map[hash.Hash]*recon.FileRecord
	dedup     map[hash.Hash][]shard.Xorb
	fail      map[string]int // route name → remaining 503 answers
	frames    []wire.ErrorFrame
	gen       int  // transfer URLs of older generations answer 403
	forbidAll bool // every transfer request bumps gen first (so it always 403s)
	forbidN   int  // the next forbidN transfer requests bump gen first
	corruptN  int  // the next corruptN transfer answers flip a byte
	truncN    int  // the next truncN transfer answers stop one byte short of their Content-Length
	cutN      int  // the next cutN transfer answers stop after half their bytes
	hits      map[string]int
	ranges    []string // Range headers of the transfer requests, in arrival order

	xorbBytes   atomic.Int64
	shardBytes  atomic.Int64
	transferHdr atomic.Bool  // a transfer request carried Authorization
	served      atomic.Int64 // bytes the transfer route wrote
	sessionIDs  sync.Map
}

func newFakeCAS(t testing.TB) *fakeCAS {
	return &fakeCAS{
		t: t, token: "secret-token",
		xorbs: map[hash.Hash][]byte{}, layouts: map[hash.Hash]*xorb.Layout{},
		files: map[hash.Hash]*recon.FileRecord{}, dedup: map[hash.Hash][]shard.Xorb{},
		fail: map[string]int{}, hits: map[string]int{},
		hmacKey: hash.Keyed(hash.DataKey, []byte("fake hmac key")),
	}
}

func (f *fakeCAS) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/xorbs/{prefix}/{hash}", f.auth("xorb", f.postXorb))
	mux.HandleFunc("POST /v1/shards", f.auth("shard-v1", f.postShard(false)))
	mux.HandleFunc("POST /v2/shards", f.auth("shard-v2", f.postShard(true)))
	mux.HandleFunc("GET /v1/reconstructions/{file}", f.auth("recon-v1", f.recon(false)))
	mux.HandleFunc("GET /v2/reconstructions/{file}", f.auth("recon-v2", f.recon(true)))
	mux.HandleFunc("GET /v1/chunks/{prefix}/{hash}", f.auth("dedup", f.getDedup))
	mux.HandleFunc("GET /xfer/{hash}", f.transfer)
	mux.HandleFunc("GET /token", func(w http.ResponseWriter, r *http.Request) {
		f.count("token")
		writeJSON(w, wire.Token{CasURL: f.base, Exp: time.Now().Add(time.Hour).Unix(), AccessToken: f.token})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeCAS) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hits[name]++
	return f.hits[name]
}

// hitsOf returns how often a route was called.
func (f *fakeCAS) hitsOf(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[name]
}

// failNext makes the next n requests of a route answer 503.
func (f *fakeCAS) failNext(name string, n int) {
	f.mu.Lock()
	f.fail[name] = n
	f.mu.Unlock()
}

func (f *fakeCAS) auth(name string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.count(name)
		if id := r.Header.Get("X-Xet-Session-Id"); id != "" {
			f.sessionIDs.Store(id, true)
		}
		if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
			http.Error(w, `{"error":"bad token"}`, http.StatusUnauthorized)
			return
		}
		f.mu.Lock()
		fail := f.fail[name] > 0
		if fail {
			f.fail[name]--
		}
		f.mu.Unlock()
		if fail {
			http.Error(w, "injected", http.StatusServiceUnavailable)
			return
		}
		h(w, r)
	}
}

func (f *fakeCAS) postXorb(w http.ResponseWriter, r *http.Request) {
	h, err := hash.Parse(r.PathValue("hash"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 80<<20))
	if err != nil {
		return
	}
	l, n, err := xorb.Validate(body, xorb.ValidateOptions{Expect: &h})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.xorbBytes.Add(int64(len(body)))
	f.mu.Lock()
	_, had := f.xorbs[h]
	f.xorbs[h], f.layouts[h] = body[:n], l
	f.mu.Unlock()
	writeJSON(w, wire.UploadXorbResponse{WasInserted: !had})
}

// register checks a shard like an origin would and records its files and dedup entries.
func (f *fakeCAS) register(body []byte) error {
	s, err := shard.Parse(body)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range s.Xorbs {
		if f.layouts[x.Hash] == nil {
			return fmt.Errorf("xorb %s not uploaded", x.Hash)
		}
	}
	for _, file := range s.Files {
		var leaves []hash.Leaf
		if len(file.Verification) != len(file.Terms) {
			return fmt.Errorf("file %s: no verification entries", file.Hash)
		}
		for i, t := range file.Terms {
			l := f.layouts[t.Xorb]
			if l == nil || l.CheckRange(t.Start, t.End) != nil {
				return fmt.Errorf("file %s term %d: bad xorb range", file.Hash, i)
			}
			if hash.Verification(l.ChunkHashes[t.Start:t.End]) != file.Verification[i] {
				return fmt.Errorf("file %s term %d: verification mismatch", file.Hash, i)
			}
			for c := t.Start; c < t.End; c++ {
				leaves = append(leaves, hash.Leaf{Hash: l.ChunkHashes[c], Size: uint64(l.RawRange(c, c+1))})
			}
		}
		if hash.File(leaves) != file.Hash {
			return fmt.Errorf("file %s: file hash mismatch", file.Hash)
		}
		rec, err := recon.NewFileRecord(file, f.layouts)
		if err != nil {
			return err
		}
		f.files[file.Hash] = rec
	}
	shard.MarkFileStarts(s)
	for _, ref := range shard.EligibleRefs(s) {
		f.dedup[ref.Chunk] = s.Xorbs
	}
	return nil
}

func (f *fakeCAS) postShard(v2 bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if v2 && f.noV2Shards {
			http.NotFound(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		f.shardBytes.Add(int64(len(body)))
		if !v2 {
			if err := f.register(body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			writeJSON(w, wire.UploadShardResponse{Result: wire.ShardSyncPerformed})
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		_ = enc.Encode(wire.Validating(0, 1))
		_ = enc.Encode(wire.Heartbeat())
		_ = enc.Encode(map[string]string{"type": "something-new"})
		f.mu.Lock()
		var inject *wire.ErrorFrame
		if len(f.frames) > 0 {
			inject = &f.frames[0]
			f.frames = f.frames[1:]
		}
		f.mu.Unlock()
		if inject != nil {
			_ = enc.Encode(inject)
			return
		}
		if err := f.register(body); err != nil {
			_ = enc.Encode(wire.Error(err.Error(), false))
			return
		}
		_ = enc.Encode(wire.Committing(wire.StageSyncing))
		_ = enc.Encode(wire.Result(wire.ShardSyncPerformed))
	}
}

// signer signs fake transfer URLs with the current generation.
type signer struct {
	base string
	gen  int
}

func (s signer) AppendURL(dst []byte, x hash.Hash, _ []recon.ByteRange) []byte {
	return fmt.Appendf(dst, "%s/xfer/%s?g=%d", s.base, x, s.gen)
}

func (f *fakeCAS) recon(v2 bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if v2 && f.noV2Recon {
			http.NotFound(w, r)
			return
		}
		h, err := hash.Parse(r.PathValue("file"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var rng *httprange.Range
		if hv := r.Header.Get("Range"); hv != "" {
			rr, err := httprange.ParseOne(hv)
			if err != nil {
				http.Error(w, err.Error(), http.StatusRequestedRangeNotSatisfiable)
				return
			}
			rng = &rr
		}
		f.mu.Lock()
		rec := f.files[h]
		layouts := f.layouts
		sg := signer{base: f.base, gen: f.gen}
		f.mu.Unlock()
		if rec == nil {
			http.NotFound(w, r)
			return
		}
		a, err := recon.Plan(rec, rng, func(x hash.Hash) (*xorb.Layout, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return layouts[x], nil
		})
		if errors.Is(err, recon.ErrRangeNotSatisfiable) {
			http.Error(w, err.Error(), http.StatusRequestedRangeNotSatisfiable)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if v2 {
			err = recon.Encoder{MaxRanges: 2}.WriteV2(w, a, sg)
		} else {
			err = recon.WriteV1(w, a, sg)
		}
		if err != nil {
			f.t.Errorf("write answer: %v", err)
		}
	}
}

func (f *fakeCAS) getDedup(w http.ResponseWriter, r *http.Request) {
	h, err := hash.Parse(r.PathValue("hash"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	xs, ok := f.dedup[h]
	f.mu.Unlock()
	if !ok || f.noDedup {
		http.NotFound(w, r)
		return
	}
	now := time.Now()
	s := shard.DedupAnswer(xs, f.hmacKey, now, now.Add(time.Hour))
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(s.AppendWithFooter(nil))
}

func (f *fakeCAS) transfer(w http.ResponseWriter, r *http.Request) {
	f.count("transfer")
	if r.Header.Get("Authorization") != "" {
		f.transferHdr.Store(true)
	}
	h, err := hash.Parse(r.PathValue("hash"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	gen, _ := strconv.Atoi(r.URL.Query().Get("g"))
	f.mu.Lock()
	if f.forbidAll || f.forbidN > 0 {
		f.forbidN--
		f.gen++
	}
	cur, body := f.gen, f.xorbs[h]
	corrupt, trunc, cut := f.corruptN > 0, f.truncN > 0, f.cutN > 0
	if corrupt {
		f.corruptN--
	}
	if trunc {
		f.truncN--
	}
	if cut {
		f.cutN--
	}
	f.ranges = append(f.ranges, r.Header.Get("Range"))
	f.mu.Unlock()
	if gen != cur {
		http.Error(w, "expired", http.StatusForbidden)
		return
	}
	if body == nil {
		http.NotFound(w, r)
		return
	}
	rr, err := httprange.ParseOne(r.Header.Get("Range"))
	if err != nil {
		http.Error(w, "single range required", http.StatusBadRequest)
		return
	}
	br, err := rr.Resolve(uint64(len(body)))
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestedRangeNotSatisfiable)
		return
	}
	part := body[br.Start : br.End+1]
	if corrupt {
		part = bytes.Clone(part)
		part[len(part)-1] ^= 0xff
	}
	w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", br.Start, br.End, len(body)))
	w.Header().Set("Content-Length", strconv.Itoa(len(part)))
	w.WriteHeader(http.StatusPartialContent)
	if trunc {
		part = part[:len(part)-1]
	}
	if cut {
		part = part[:len(part)/2]
	}
	n, _ := w.Write(part)
	f.served.Add(int64(n))
}

// hasSession reports whether any request carried a session id in UUID v7 form.
func (f *fakeCAS) hasSession() bool {
	ok := false
	f.sessionIDs.Range(func(k, _ any) bool {
		s := k.(string)
		ok = len(s) == 36 && s[14] == '7' && strings.Count(s, "-") == 4
		return !ok
	})
	return ok
}

func wireError(msg string, retryable bool) wire.ErrorFrame { return wire.Error(msg, retryable) }
