package server

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/jsontest"
	"github.com/xetcdn/xetcdn/origin/internal/ingest"
	"github.com/xetcdn/xetcdn/shared/readpath"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// wireBatch is the batch answer ids and answers stand for, built independently of readpath.WriteBatch
// from docs/protocol.md §2.9: each file's terms, and per xorb the union of the files' v1 fetch
// entries, identical entries once, sorted by chunk range then byte range, each with the URL s
// signs for its byte range alone, bound to the first file (in request order) whose answer has it.
func wireBatch(ids []hash.Hash, answers []*recon.Answer, s urlsign.Bound) *wire.BatchQueryReconstructionResponse {
	out := &wire.BatchQueryReconstructionResponse{Files: map[hash.Hash][]wire.Term{}, FetchInfo: map[hash.Hash][]wire.FetchInfo{}}
	type entry struct {
		c recon.ChunkRange
		b recon.ByteRange
		f int // the first file whose answer has the entry
	}
	ranges := map[hash.Hash][]entry{}
	for i, a := range answers {
		terms := []wire.Term{}
		for k := range a.Len() {
			t := a.Term(k)
			terms = append(terms, wire.Term{Hash: t.Xorb, UnpackedLength: t.RawBytes, Range: wire.ChunkRange{Start: t.Start, End: t.End}})
		}
		out.Files[ids[i]] = terms
		for _, xf := range a.Xorbs {
			for r := range xf.Chunks {
				ranges[xf.Hash] = append(ranges[xf.Hash], entry{xf.Chunks[r], xf.Bytes[r], i})
			}
		}
	}
	for h, es := range ranges {
		slices.SortStableFunc(es, func(x, y entry) int { // stable: the first file's copy first
			return cmp.Or(cmp.Compare(x.c.Start, y.c.Start), cmp.Compare(x.c.End, y.c.End),
				cmp.Compare(x.b.Start, y.b.Start), cmp.Compare(x.b.End, y.b.End))
		})
		for k, e := range es {
			if k > 0 && e.c == es[k-1].c && e.b == es[k-1].b {
				continue
			}
			out.FetchInfo[h] = append(out.FetchInfo[h], wire.FetchInfo{
				Range:    wire.ChunkRange{Start: e.c.Start, End: e.c.End},
				URL:      string(s.WithFile(ids[e.f]).AppendURL(nil, h, []recon.ByteRange{e.b})),
				URLRange: wire.ByteRange{Start: e.b.Start, End: e.b.End}})
		}
	}
	return out
}

// planWhole plans a whole-file answer of a record made of terms (no layout is needed).
func planWhole(t *testing.T, terms ...recon.Term) *recon.Answer {
	t.Helper()
	rec := &recon.FileRecord{Terms: terms}
	for _, tm := range terms {
		rec.Size += uint64(tm.RawBytes)
	}
	a, err := recon.Plan(rec, nil, func(hash.Hash) (*xorb.Layout, error) { return nil, errors.New("whole file needs no layout") })
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestWriteBatchMatchesWire: the hand-written batch answer decodes to exactly what json.Marshal
// of wire.BatchQueryReconstructionResponse decodes to, for an empty file, files sharing
// xorbs (identical and overlapping entries), answers long enough to be written in several
// pieces, values at their limits, and URLs with characters json.Marshal would escape.
func TestWriteBatchMatchesWire(t *testing.T) {
	x1, x2, x3 := hash.Chunk([]byte("x1")), hash.Chunk([]byte("x2")), hash.Chunk([]byte("x3"))
	f1, f2, f3 := hash.Chunk([]byte("f1")), hash.Chunk([]byte("f2")), hash.Chunk([]byte("f3"))
	term := func(x hash.Hash, s, e, bs uint32) recon.Term {
		return recon.Term{Xorb: x, Start: s, End: e, RawBytes: 100 * (e - s), ByteStart: bs, ByteEnd: bs + 50*(e-s)}
	}
	shared1 := planWhole(t, term(x1, 0, 4, 0), term(x2, 2, 3, 500), term(x1, 4, 6, 200))
	shared2 := planWhole(t, term(x1, 0, 4, 0), term(x3, 0, 1, 0), term(x1, 1, 2, 50))
	var long []recon.Term
	for i := range uint32(1500) { // > batchTermPiece terms, > batchFetchPiece ranges, > batchFlushAt bytes
		long = append(long, term([]hash.Hash{x1, x2, x3}[i%3], 2*i, 2*i+1, 1000*i))
	}
	longA := planWhole(t, long...)
	maxA := planWhole(t,
		recon.Term{Xorb: x1, Start: 0, End: xorb.MaxChunks, RawBytes: xorb.MaxRawBytes, ByteStart: 0, ByteEnd: math.MaxUint32},
		recon.Term{Xorb: x2, Start: xorb.MaxChunks - 1, End: xorb.MaxChunks, RawBytes: xorb.MaxChunkRaw, ByteStart: math.MaxUint32 - 9, ByteEnd: math.MaxUint32})
	var signers []urlsign.Bound
	// The second base needs no JSON escaping but json.Marshal escapes it anyway (&, <, >).
	for _, base := range []string{"https://edge.example.org", "https://cdn.example.org/a&b<c>'d+e%2F"} {
		signer, err := urlsign.New(urlsign.Options{BaseURL: base, Key: make([]byte, urlsign.MinKeyLen)})
		if err != nil {
			t.Fatal(err)
		}
		signers = append(signers, signer.Bind("models/acme/x", hash.Zero, time.Unix(1_800_000_000, 0)))
	}
	tests := []struct {
		name    string
		ids     []hash.Hash
		answers []*recon.Answer
	}{
		{"empty file", []hash.Hash{hash.Zero}, []*recon.Answer{planWhole(t)}},
		{"shared xorbs", []hash.Hash{f1, f2, hash.Zero}, []*recon.Answer{shared1, shared2, planWhole(t)}},
		{"same answer twice", []hash.Hash{f1, f2}, []*recon.Answer{shared1, shared1}},
		{"long", []hash.Hash{f3, f1}, []*recon.Answer{longA, shared1}},
		{"max values", []hash.Hash{f1}, []*recon.Answer{maxA}},
	}
	for _, tc := range tests {
		for _, s := range signers {
			var buf bytes.Buffer
			if err := readpath.WriteBatch(&buf, tc.ids, tc.answers, s); err != nil {
				t.Fatal(err)
			}
			want := wireBatch(tc.ids, tc.answers, s)
			ref, err := json.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(jsontest.Value(t, buf.Bytes()), jsontest.Value(t, ref)) {
				t.Fatalf("%s: batch answer and wire type differ:\n got  %.400s\n want %.400s", tc.name, buf.Bytes(), ref)
			}
			var got, fromRef wire.BatchQueryReconstructionResponse
			if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if err := json.Unmarshal(ref, &fromRef); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, fromRef) {
				t.Fatalf("%s: decodes unlike the wire type", tc.name)
			}
		}
	}
}

// TestFramesMatchWire: the /v2/shards frames are the wire package's typed frames, and their
// bytes are those the origin wrote before it used them (one JSON object and a newline).
func TestFramesMatchWire(t *testing.T) {
	tests := []struct {
		got  []byte
		want string
		wire any
	}{
		{progressFrame(ingest.Progress{Stage: ingest.StageValidating, Verified: 0, Total: 512}),
			`{"type":"validating","verified":0,"total":512}`, wire.Validating(0, 512)},
		{progressFrame(ingest.Progress{Stage: ingest.StageValidating, Verified: math.MaxUint64, Total: math.MaxUint64}),
			`{"type":"validating","verified":18446744073709551615,"total":18446744073709551615}`, wire.Validating(math.MaxUint64, math.MaxUint64)},
		{progressFrame(ingest.Progress{Stage: ingest.StageUploading}), `{"type":"committing","stage":"uploading"}`, wire.Committing(wire.StageUploading)},
		{progressFrame(ingest.Progress{Stage: ingest.StageSyncing}), `{"type":"committing","stage":"syncing"}`, wire.Committing(wire.StageSyncing)},
		{resultFrame(true), `{"type":"result","result":1}`, wire.Result(wire.ShardSyncPerformed)},
		{resultFrame(false), `{"type":"result","result":0}`, wire.Result(wire.ShardExists)},
		{errorFrame(errors.New(`bad shard: "x" <y> & z`), http.StatusBadRequest),
			`{"type":"error","message":"bad shard: \"x\" \u003cy\u003e \u0026 z","retryable":false}`, wire.Error(`bad shard: "x" <y> & z`, false)},
		{errorFrame(errors.New("slow"), http.StatusRequestTimeout), `{"type":"error","message":"slow","retryable":true}`, wire.Error("slow", true)},
	}
	for _, tc := range tests {
		if string(tc.got) != tc.want+"\n" {
			t.Errorf("frame %q, want %q", tc.got, tc.want+"\n")
		}
		if b, _ := json.Marshal(tc.wire); string(b)+"\n" != string(tc.got) {
			t.Errorf("frame %q, wire type %q", tc.got, b)
		}
	}
}
