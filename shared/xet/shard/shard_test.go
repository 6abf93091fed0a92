package shard

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// loadHex reads a testdata file of hex digits, ignoring whitespace and '#' comments.
func loadHex(t testing.TB, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var digits strings.Builder
	for line := range strings.Lines(string(raw)) {
		line, _, _ = strings.Cut(line, "#")
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

// testHash returns a distinct, deterministic hash for i.
func testHash(i int) hash.Hash {
	return hash.Chunk(binary.LittleEndian.AppendUint64(nil, uint64(i)))
}

// helloShard builds the §12.3 "hello world" upload from first principles: every hash is
// computed here, none is copied from the golden bytes.
func helloShard(withSHA bool) *Shard {
	data := []byte("hello world")
	ch := hash.Chunk(data)
	xorbHash := hash.Merkle([]hash.Leaf{{Hash: ch, Size: uint64(len(data))}})
	f := File{
		Hash:         hash.File([]hash.Leaf{{Hash: ch, Size: uint64(len(data))}}),
		Terms:        []Term{{Xorb: xorbHash, RawBytes: uint32(len(data)), Start: 0, End: 1}},
		Verification: []hash.Hash{hash.Verification([]hash.Hash{ch})},
	}
	if withSHA {
		sha := hash.FromSHA256(sha256.Sum256(data))
		f.SHA256 = &sha
	}
	return &Shard{
		Files: []File{f},
		Xorbs: []Xorb{{
			Hash:     xorbHash,
			RawBytes: uint32(len(data)),
			Chunks:   []XorbChunk{{Hash: ch, RawStart: 0, RawLen: uint32(len(data))}},
		}},
	}
}

func TestHelloUploadGolden(t *testing.T) {
	golden := loadHex(t, "hello_upload.hex")
	if len(golden) != 432 {
		t.Fatalf("golden is %d bytes, want 432", len(golden))
	}
	want := helloShard(true)

	t.Run("write", func(t *testing.T) {
		got := want.AppendUpload(nil)
		if !bytes.Equal(got, golden) {
			t.Fatalf("AppendUpload mismatch\n got %x\nwant %x", got, golden)
		}
		if n := want.EncodedLen(false); n != len(golden) {
			t.Fatalf("EncodedLen = %d, want %d", n, len(golden))
		}
		prefix := []byte("prefix")
		got = want.AppendUpload(bytes.Clone(prefix))
		if !bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], golden) {
			t.Fatal("AppendUpload onto a non-empty dst changed the prefix or the shard")
		}
	})
	t.Run("parse", func(t *testing.T) {
		got, err := Parse(golden)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Parse = %+v\nwant %+v", got, want)
		}
		if s := got.Files[0].Hash.String(); s != "f15edd43b7e85cfd25e2758ffe13b99fdd09dfa817e8d9f6548722a7a126db7f" {
			t.Fatalf("file id %s", s)
		}
		if s := got.Files[0].SHA256.String(); s != "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9" {
			t.Fatalf("sha256 %s", s)
		}
		if n := got.Files[0].Size(); n != 11 {
			t.Fatalf("size %d", n)
		}
	})
	t.Run("trailing bytes ignored", func(t *testing.T) {
		body := append(bytes.Clone(golden), make([]byte, 100)...)
		got, err := Parse(body)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatal("trailing bytes changed the result")
		}
	})
}

func TestHFJSFooterForm(t *testing.T) {
	golden := loadHex(t, "hello_hfjs_footer.hex")
	if len(golden) != 584 {
		t.Fatalf("golden is %d bytes, want 584", len(golden))
	}
	s, err := Parse(golden)
	if err != nil {
		t.Fatal(err)
	}
	want := helloShard(false)
	want.Xorbs[0].BytesOnDisk = 19
	want.Footer = &Footer{CreatedAt: 1756489133, StoredBytesOnDisk: 19, StoredBytes: 11}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("Parse = %+v\nwant %+v", s, want)
	}

	// Our writer produces the same records; its footer differs only where huggingface.js
	// leaves fields zero (table offsets, materialized_bytes).
	out := want.AppendWithFooter(nil)
	if len(out) != 584 || want.EncodedLen(true) != 584 {
		t.Fatalf("AppendWithFooter wrote %d bytes, EncodedLen %d", len(out), want.EncodedLen(true))
	}
	if !bytes.Equal(out[:384], golden[:384]) {
		t.Fatalf("records differ\n got %x\nwant %x", out[:384], golden[:384])
	}
	ft := out[384:]
	for _, c := range []struct {
		name     string
		off      int
		got, exp uint64
	}{
		{"version", footVersion, le64(ft[footVersion:]), 1},
		{"file_info_offset", footFileInfo, le64(ft[footFileInfo:]), 48},
		{"xorb_info_offset", footXorbInfo, le64(ft[footXorbInfo:]), 240},
		{"file_lookup_offset", 24, le64(ft[24:]), 384},
		{"file_lookup_num", 32, le64(ft[32:]), 0},
		{"xorb_lookup_offset", 40, le64(ft[40:]), 384},
		{"chunk_lookup_offset", 56, le64(ft[56:]), 384},
		{"created", footCreated, le64(ft[footCreated:]), 1756489133},
		{"stored_bytes_on_disk", footStoredOnDisk, le64(ft[footStoredOnDisk:]), 19},
		{"materialized_bytes", footMaterialized, le64(ft[footMaterialized:]), 11},
		{"stored_bytes", footStored, le64(ft[footStored:]), 11},
		{"footer_offset", footOffset, le64(ft[footOffset:]), 384},
	} {
		if c.got != c.exp {
			t.Errorf("footer %s = %d, want %d", c.name, c.got, c.exp)
		}
	}
	again, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	want.Footer.MaterializedBytes = 11
	if !reflect.DeepEqual(again, want) {
		t.Fatalf("round trip = %+v\nwant %+v", again, want)
	}
}

// sampleShard has several files (with and without sha256, one with no terms) and xorbs.
func sampleShard(verification bool) *Shard {
	s := &Shard{}
	for x := range 3 {
		xb := Xorb{Hash: testHash(1000 + x), Flags: uint32(x), BytesOnDisk: uint32(100 * x)}
		var off uint32
		for c := range 5 + x {
			n := uint32(1000 + c)
			xb.Chunks = append(xb.Chunks, XorbChunk{Hash: testHash(2000 + 10*x + c), RawStart: off, RawLen: n, Flags: uint32(c%2) << 31})
			off += n
		}
		xb.RawBytes = off
		s.Xorbs = append(s.Xorbs, xb)
	}
	for f := range 4 {
		fl := File{Hash: testHash(f)}
		for k := range f { // file 0 has no terms
			fl.Terms = append(fl.Terms, Term{Xorb: testHash(1000 + k%3), Flags: uint32(k), RawBytes: uint32(500 * (k + 1)), Start: uint32(k), End: uint32(k + 2)})
		}
		if verification {
			fl.Verification = make([]hash.Hash, len(fl.Terms))
			for k := range fl.Verification {
				fl.Verification[k] = testHash(3000 + 10*f + k)
			}
		}
		if f%2 == 1 {
			sha := testHash(4000 + f)
			fl.SHA256 = &sha
		}
		s.Files = append(s.Files, fl)
	}
	return s
}

func TestRoundTrip(t *testing.T) {
	key := testHash(99)
	created := time.Unix(1700000000, 0)
	dedup := DedupAnswer(sampleShard(true).Xorbs, key, created, created.Add(24*time.Hour))
	for _, tc := range []struct {
		name   string
		s      *Shard
		footer bool
	}{
		{"empty upload", &Shard{}, false},
		{"empty with footer", &Shard{}, true},
		{"hello", helloShard(true), false},
		{"sample verified", sampleShard(true), false},
		{"sample unverified", sampleShard(false), false},
		{"sample with footer", sampleShard(true), true},
		{"files only", &Shard{Files: sampleShard(true).Files}, false},
		{"xorbs only", &Shard{Xorbs: sampleShard(true).Xorbs}, true},
		{"dedup answer", dedup, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.s.Validate(); err != nil {
				t.Fatal(err)
			}
			var body []byte
			if tc.footer {
				body = tc.s.AppendWithFooter([]byte{1, 2, 3})[3:]
			} else {
				body = tc.s.AppendUpload([]byte{1, 2, 3})[3:]
			}
			if len(body) != tc.s.EncodedLen(tc.footer) {
				t.Fatalf("wrote %d bytes, EncodedLen %d", len(body), tc.s.EncodedLen(tc.footer))
			}
			got, err := Parse(body)
			if err != nil {
				t.Fatal(err)
			}
			want := *tc.s
			want.Footer = nil
			if tc.footer {
				ft := Footer{}
				if tc.s.Footer != nil {
					ft = *tc.s.Footer
				}
				ft.MaterializedBytes, ft.StoredBytes, ft.StoredBytesOnDisk = 0, 0, 0
				for _, f := range tc.s.Files {
					ft.MaterializedBytes += f.Size()
				}
				for _, x := range tc.s.Xorbs {
					ft.StoredBytes += uint64(x.RawBytes)
					ft.StoredBytesOnDisk += uint64(x.BytesOnDisk)
				}
				want.Footer = &ft
			}
			if !reflect.DeepEqual(got, &want) {
				t.Fatalf("round trip\n got %+v\nwant %+v", got, &want)
			}
			// Writing the parsed value again gives the same bytes.
			var again []byte
			if tc.footer {
				again = got.AppendWithFooter(nil)
			} else {
				again = got.AppendUpload(nil)
			}
			if !bytes.Equal(again, body) {
				t.Fatal("re-encoding the parsed shard changed the bytes")
			}
		})
	}
}

// put returns a copy of b with a little-endian value of width 4 or 8 written at off.
func put(b []byte, off int, width int, v uint64) []byte {
	b = bytes.Clone(b)
	if width == 4 {
		binary.LittleEndian.PutUint32(b[off:], uint32(v))
	} else {
		binary.LittleEndian.PutUint64(b[off:], v)
	}
	return b
}

func TestMalformed(t *testing.T) {
	up := loadHex(t, "hello_upload.hex")      // file hdr 48, xorb section 288, tail 432
	js := loadHex(t, "hello_hfjs_footer.hex") // file hdr 48, xorb section 240, footer 384
	ft := 384                                 // footer offset in js
	mixed := (&Shard{Files: []File{helloShard(true).Files[0], {Hash: testHash(5)}}}).AppendUpload(nil)
	flipped := bytes.Clone(up)
	flipped[31] ^= 1
	oneFile := (&Shard{Files: []File{{Hash: testHash(1)}}}).AppendUpload(nil)

	for _, tc := range []struct {
		name   string
		body   []byte
		want   error
		offset int
	}{
		{"empty", nil, ErrCorrupt, 0},
		{"short header", up[:47], ErrCorrupt, 0},
		{"bad magic first byte", put(up, 0, 4, 0), ErrCorrupt, 0},
		{"bad magic last byte", flipped, ErrCorrupt, 0},
		{"version 1", put(up, 32, 8, 1), ErrCorrupt, 32},
		{"version 3", put(up, 32, 8, 3), ErrCorrupt, 32},
		{"footer size 100", put(up, 40, 8, 100), ErrCorrupt, 40},
		{"footer size 200 without footer", put(up, 40, 8, 200), ErrCorrupt, 48},
		{"footer size 200, body too short", put(up[:200], 40, 8, 200), ErrCorrupt, 200},
		{"header only", up[:48], ErrCorrupt, 48},
		{"term count exceeds body", put(up, 84, 4, 1000), ErrCorrupt, 48},
		{"term count max u32", put(up, 84, 4, 0xFFFFFFFF), ErrCorrupt, 48},
		{"chunk count exceeds body", put(up, 324, 4, 3), ErrCorrupt, 288},
		{"chunk count max u32", put(up, 324, 4, 0xFFFFFFFF), ErrCorrupt, 288},
		{"missing xorb bookend", up[:384], ErrCorrupt, 384},
		{"missing file bookend", oneFile[:96], ErrCorrupt, 96},
		{"mixed verification", mixed, ErrCorrupt, 240},
		{"footer version 2", put(js, ft, 8, 2), ErrCorrupt, ft},
		{"footer offset wrong", put(js, ft+footOffset, 8, 383), ErrCorrupt, ft + footOffset},
		{"file info offset wrong", put(js, ft+footFileInfo, 8, 0), ErrCorrupt, ft + footFileInfo},
		{"xorb info offset wrong", put(js, ft+footXorbInfo, 8, 288), ErrCorrupt, ft + footXorbInfo},
		{"file table entries at 0", put(js, ft+32, 8, 1), ErrCorrupt, ft + 24},
		{"xorb table past footer", put(js, ft+40, 8, 385), ErrCorrupt, ft + 40},
		{"chunk table before tail", put(js, ft+56, 8, 300), ErrCorrupt, ft + 56},
		{"chunk table overflows", put(put(js, ft+56, 8, 384), ft+64, 8, 1<<62), ErrCorrupt, ft + 56},
		{"byte after footer", append(bytes.Clone(js), 0), ErrCorrupt, ft + 1 + footVersion},
		{"oversized", append(bytes.Clone(up), make([]byte, MaxSize)...), ErrTooLarge, MaxSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.body)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Parse = %v, %v; want %v", s, err, tc.want)
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %T is not a *FormatError", err)
			}
			if fe.Offset != tc.offset {
				t.Fatalf("offset %d, want %d (%v)", fe.Offset, tc.offset, err)
			}
		})
	}
}

func TestFooterLookupTablesAccepted(t *testing.T) {
	// A full shard: one entry in each lookup table between the xorb bookend and the footer.
	s := helloShard(true)
	body := s.AppendUpload(nil)
	tail := len(body)
	body = append(body, make([]byte, fileLookupEntry+xorbLookupEntry+chunkLookupEntry)...)
	at := len(body)
	body = put(body, 40, 8, FooterSize)
	footer := (&Shard{}).AppendWithFooter(nil)[3*RecordSize:]
	body = append(body, footer...)
	for i, off := range []int{tail, tail + fileLookupEntry, tail + fileLookupEntry + xorbLookupEntry} {
		body = put(body, at+footTables+16*i, 8, uint64(off))
		body = put(body, at+footTables+16*i+8, 8, 1)
	}
	body = put(body, at+footXorbInfo, 8, 288)
	body = put(body, at+footOffset, 8, uint64(at))
	got, err := Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Files, s.Files) || !reflect.DeepEqual(got.Xorbs, s.Xorbs) || got.Footer == nil {
		t.Fatalf("got %+v", got)
	}
	// One more chunk-table entry no longer fits before the footer.
	if _, err := Parse(put(body, at+footTables+16*2+8, 8, 2)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("overlong chunk table: %v", err)
	}
}

func TestTruncatedEverywhere(t *testing.T) {
	for _, name := range []string{"hello_upload.hex", "hello_hfjs_footer.hex"} {
		body := loadHex(t, name)
		for n := range len(body) {
			if _, err := Parse(body[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s truncated to %d bytes: %v", name, n, err)
			}
		}
	}
}

func TestHugeCountsDoNotAllocate(t *testing.T) {
	// Counts that claim far more records than the body holds must fail before any allocation
	// sized by the count.
	up := loadHex(t, "hello_upload.hex")
	for _, body := range [][]byte{put(up, 84, 4, 0xFFFFFFFF), put(up, 324, 4, 0xFFFFFFFF)} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		const runs = 100
		for range runs {
			if _, err := Parse(body); err == nil {
				t.Fatal("no error")
			}
		}
		runtime.ReadMemStats(&after)
		if perRun := (after.TotalAlloc - before.TotalAlloc) / runs; perRun > 1024 {
			t.Fatalf("error path allocated %d bytes per Parse", perRun)
		}
	}
}

func TestParseAllocations(t *testing.T) {
	body := sampleShard(true).AppendUpload(nil)
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := Parse(body); err != nil {
			t.Fatal(err)
		}
	})
	// Shard, files, terms, verification, sha256, xorbs, chunks.
	if allocs > 7 {
		t.Fatalf("Parse made %v allocations, want ≤ 7", allocs)
	}
}

func TestValidate(t *testing.T) {
	bookend := hash.Hash{}
	for i := range bookend {
		bookend[i] = 0xff
	}
	short := sampleShard(true)
	short.Files[2].Verification = short.Files[2].Verification[:1]
	mixed := sampleShard(true)
	mixed.Files[3].Verification = nil
	for _, tc := range []struct {
		name string
		s    *Shard
		ok   bool
	}{
		{"sample", sampleShard(true), true},
		{"empty", &Shard{}, true},
		{"bookend file", &Shard{Files: []File{{Hash: bookend}}}, false},
		{"bookend xorb", &Shard{Xorbs: []Xorb{{Hash: bookend}}}, false},
		{"short verification", short, false},
		{"mixed verification", mixed, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Fatalf("Validate = %v, want ok=%v", err, tc.ok)
			}
			// The writers never panic, even on invalid values.
			_ = tc.s.AppendUpload(nil)
			_ = tc.s.AppendWithFooter(nil)
		})
	}
}

func TestDedupAnswer(t *testing.T) {
	src := sampleShard(true).Xorbs
	orig := DedupAnswer(src, hash.Zero, time.Time{}, time.Time{}) // deep copy of the input
	key := testHash(77)
	created, expiry := time.Unix(1700000000, 0), time.Unix(1700086400, 0)

	for _, tc := range []struct {
		name string
		key  hash.Hash
	}{{"keyed", key}, {"unkeyed", hash.Zero}} {
		t.Run(tc.name, func(t *testing.T) {
			ans := DedupAnswer(src, tc.key, created, expiry)
			if !reflect.DeepEqual(src, orig.Xorbs) {
				t.Fatal("DedupAnswer modified its input")
			}
			if ans.Files != nil || len(ans.Xorbs) != len(src) {
				t.Fatalf("files %v, %d xorbs", ans.Files, len(ans.Xorbs))
			}
			ans.Xorbs[0].Chunks[0].Flags ^= 1 // must not reach src
			if src[0].Chunks[0].Flags == ans.Xorbs[0].Chunks[0].Flags {
				t.Fatal("answer shares chunk memory with the input")
			}
			ans.Xorbs[0].Chunks[0].Flags ^= 1

			body := ans.AppendWithFooter(nil)
			got, err := Parse(body)
			if err != nil {
				t.Fatal(err)
			}
			if got.Footer.HMACKey != tc.key || got.Footer.CreatedAt != 1700000000 || got.Footer.KeyExpiry != 1700086400 {
				t.Fatalf("footer %+v", got.Footer)
			}
			if got.Footer.Expired(time.Unix(1700086399, 0)) || !got.Footer.Expired(time.Unix(1700086400, 0)) {
				t.Fatal("Expired boundary wrong")
			}
			for i, x := range src {
				if got.Xorbs[i].Hash != x.Hash || got.Xorbs[i].RawBytes != x.RawBytes {
					t.Fatalf("xorb %d header changed", i)
				}
				for j, c := range x.Chunks {
					g := got.Xorbs[i].Chunks[j]
					wantHash := c.Hash
					if !tc.key.IsZero() {
						wantHash = hash.HMAC(tc.key, c.Hash)
						if g.Hash == c.Hash {
							t.Fatalf("chunk %d/%d disclosed raw", i, j)
						}
					}
					if g.Hash != wantHash || g.RawStart != c.RawStart || g.RawLen != c.RawLen || g.Flags != c.Flags {
						t.Fatalf("chunk %d/%d = %+v, want hash %v of %+v", i, j, g, wantHash, c)
					}
					loc, ok := got.FindChunk(c.Hash)
					if !ok || got.Xorbs[loc.Xorb].Chunks[loc.Chunk] != g {
						t.Fatalf("FindChunk(%v) = %v, %v", c.Hash, loc, ok)
					}
				}
			}
			if _, ok := got.FindChunk(testHash(-1)); ok {
				t.Fatal("FindChunk found an absent chunk")
			}
		})
	}
	t.Run("pre-epoch and zero times", func(t *testing.T) {
		ans := DedupAnswer(nil, key, time.Unix(-5, 0), time.Time{})
		if ans.Footer.CreatedAt != 0 || ans.Footer.KeyExpiry != 0 || ans.Xorbs != nil {
			t.Fatalf("%+v", ans)
		}
		if !ans.Footer.Expired(time.Now()) {
			t.Fatal("expiry 0 not expired")
		}
	})
}

func TestEligibleChunks(t *testing.T) {
	mod0 := testHash(500)
	clear(mod0[24:]) // word 3 = 0, so hash % 1024 == 0
	plain := func(i int) hash.Hash {
		h := testHash(i)
		if h.Mod(GlobalDedupModulus) == 0 {
			h[24] ^= 1
		}
		return h
	}
	x0 := Xorb{Hash: plain(10), Chunks: []XorbChunk{
		{Hash: plain(11)}, // file A starts here: (c)
		{Hash: mod0},      // (a)
		{Hash: plain(12), Flags: ChunkFlagGlobalDedup}, // (b)
		{Hash: plain(13)}, // not eligible
	}}
	x1 := Xorb{Hash: plain(20), Chunks: []XorbChunk{
		{Hash: plain(21)},
		{Hash: plain(22)}, // file B starts at chunk 1: (c)
		{Hash: mod0},      // (a) again, other xorb
	}}
	s := &Shard{
		Files: []File{
			{Hash: plain(1), Terms: []Term{{Xorb: x0.Hash, Start: 0, End: 2}, {Xorb: x1.Hash, Start: 0, End: 1}}},
			{Hash: plain(2), Terms: []Term{{Xorb: x1.Hash, Start: 1, End: 3}}},
			{Hash: plain(3), Terms: []Term{{Xorb: plain(99), Start: 0, End: 1}}}, // xorb not in shard
			{Hash: plain(4), Terms: []Term{{Xorb: x1.Hash, Start: 7, End: 8}}},   // past the xorb's chunks
			{Hash: plain(5)}, // no terms
		},
		Xorbs: []Xorb{x0, x1},
	}
	wantRefs := []ChunkRef{
		{plain(11), x0.Hash, 0}, {mod0, x0.Hash, 1}, {plain(12), x0.Hash, 2},
		{plain(22), x1.Hash, 1}, {mod0, x1.Hash, 2},
	}
	if got := EligibleRefs(s); !reflect.DeepEqual(got, wantRefs) {
		t.Fatalf("EligibleRefs = %v\nwant %v", got, wantRefs)
	}
	wantChunks := []hash.Hash{plain(11), mod0, plain(12), plain(22)}
	if got := EligibleChunks(s); !reflect.DeepEqual(got, wantChunks) {
		t.Fatalf("EligibleChunks = %v\nwant %v", got, wantChunks)
	}
	if got := EligibleChunks(&Shard{}); len(got) != 0 {
		t.Fatalf("empty shard: %v", got)
	}

	var orig [][]uint32
	for _, x := range s.Xorbs {
		var fl []uint32
		for _, c := range x.Chunks {
			fl = append(fl, c.Flags)
		}
		orig = append(orig, fl)
	}
	MarkFileStarts(s)
	for i, x := range s.Xorbs {
		for j, c := range x.Chunks {
			want := orig[i][j]
			if (i == 0 && j == 0) || (i == 1 && j == 1) {
				want |= ChunkFlagGlobalDedup
			}
			if c.Flags != want {
				t.Fatalf("chunk %d/%d flags %#x, want %#x", i, j, c.Flags, want)
			}
		}
	}
}
