package internalapi

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"net/url"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// layoutOf builds a real (verifying) layout of one chunk per element of chunks.
func layoutOf(chunks ...string) *xorb.Layout {
	b := xorb.NewBuilder(xorb.None)
	for _, c := range chunks {
		b.Add([]byte(c), hash.Chunk([]byte(c)))
	}
	_, l := b.Finish()
	return l
}

func mustMarshal(t testing.TB, l *xorb.Layout) []byte {
	t.Helper()
	b, err := l.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// oldLayoutsAnswer is the origin's layouts encoding as internalLayouts wrote it before this
// package existed (origin/internal/server/internal.go at c4d1cf6), kept verbatim as the
// reference AppendLayouts must reproduce byte for byte. It consumes got.
func oldLayoutsAnswer(want []hash.Hash, got map[hash.Hash][]byte) []byte {
	size := 4
	for _, b := range got {
		size += hash.Size + 4 + len(b)
	}
	out := make([]byte, 0, size)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(got)))
	for _, h := range want {
		b, ok := got[h]
		if !ok {
			continue
		}
		delete(got, h) // duplicates in the request are answered once
		out = append(out, h[:]...)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(b)))
		out = append(out, b...)
	}
	return out
}

// oldEventsAnswer is the origin's events encoding before this package existed: WriteJSON of
// {"events":[…]} (json.Marshal and a newline) with At in UTC, and a literal for no events.
func oldEventsAnswer(evs []Event) []byte {
	type eventJSON struct {
		Seq   int64       `json:"seq"`
		Scope string      `json:"scope"`
		Files []hash.Hash `json:"files"` // null: every file of the scope
		At    time.Time   `json:"at"`
	}
	if len(evs) == 0 {
		return []byte(`{"events":[]}` + "\n")
	}
	out := make([]eventJSON, len(evs))
	for i, e := range evs {
		out[i] = eventJSON{Seq: e.Seq, Scope: e.Scope, Files: e.Files, At: e.At.UTC()}
	}
	b, err := json.Marshal(struct {
		Events []eventJSON `json:"events"`
	}{out})
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

// fullLayoutBytes is a binary layout of the maximum size (not a real xorb: the encoder treats
// layouts as opaque bytes).
func fullLayoutBytes() []byte {
	b := make([]byte, MaxLayoutBytes)
	b[0] = 1
	binary.LittleEndian.PutUint32(b[1:], xorb.MaxChunks)
	for i := range b[5:] {
		b[5+i] = byte(i * 7)
	}
	return b
}

func TestMaxLayoutBytes(t *testing.T) {
	chunks := make([]string, xorb.MaxChunks)
	for i := range chunks {
		chunks[i] = strconv.Itoa(i)
	}
	l := layoutOf(chunks...)
	if l.NumChunks() != xorb.MaxChunks {
		t.Fatalf("built %d chunks", l.NumChunks())
	}
	if n := len(mustMarshal(t, l)); n != MaxLayoutBytes {
		t.Fatalf("a full layout encodes in %d bytes, MaxLayoutBytes is %d", n, MaxLayoutBytes)
	}
}

// TestAppendLayoutsMatchesOld: the new encoder writes exactly the bytes the origin wrote before.
func TestAppendLayoutsMatchesOld(t *testing.T) {
	a, b, c := layoutOf("a"), layoutOf("bb", "cc"), layoutOf("x", "y", "z")
	full := fullLayoutBytes()
	var fullHash hash.Hash
	copy(fullHash[:], full[5:])
	missing := hash.Chunk([]byte("missing"))
	r := rand.New(rand.NewPCG(1, 2))
	many := map[hash.Hash][]byte{}
	var manyWant []hash.Hash
	for i := range MaxLayoutsPerRequest {
		var h hash.Hash
		binary.LittleEndian.PutUint64(h[:], r.Uint64())
		manyWant = append(manyWant, h)
		if i%3 != 0 {
			many[h] = bytes.Repeat([]byte{byte(i)}, 1+r.IntN(200))
		}
	}
	tests := []struct {
		name string
		want []hash.Hash
		got  map[hash.Hash][]byte
	}{
		{"none found", []hash.Hash{missing}, map[hash.Hash][]byte{}},
		{"one", []hash.Hash{a.Hash}, map[hash.Hash][]byte{a.Hash: mustMarshal(t, a)}},
		{"missing and repeated", []hash.Hash{b.Hash, missing, a.Hash, b.Hash, c.Hash, a.Hash},
			map[hash.Hash][]byte{a.Hash: mustMarshal(t, a), b.Hash: mustMarshal(t, b), c.Hash: mustMarshal(t, c)}},
		{"full size", []hash.Hash{fullHash, a.Hash}, map[hash.Hash][]byte{fullHash: full, a.Hash: mustMarshal(t, a)}},
		{"empty layout bytes", []hash.Hash{a.Hash}, map[hash.Hash][]byte{a.Hash: {}}},
		{"1024 hashes", manyWant, many},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gotCopy := make(map[hash.Hash][]byte, len(tc.got))
			for h, v := range tc.got {
				gotCopy[h] = v
			}
			got, err := AppendLayouts(nil, tc.want, tc.got)
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.got) != len(gotCopy) {
				t.Fatal("AppendLayouts modified its map")
			}
			if want := oldLayoutsAnswer(tc.want, gotCopy); !bytes.Equal(got, want) {
				t.Fatalf("new encoding differs from the old one:\n got  %x\n want %x", clip(got), clip(want))
			}
			prefixed, err := AppendLayouts([]byte("xyz"), tc.want, tc.got)
			if err != nil || string(prefixed[:3]) != "xyz" || !bytes.Equal(prefixed[3:], got) {
				t.Fatalf("AppendLayouts does not append: %v", err)
			}
		})
	}
	// An entry over the limit is the encoder's error, not an answer every edge refuses.
	if _, err := AppendLayouts(nil, []hash.Hash{a.Hash}, map[hash.Hash][]byte{a.Hash: make([]byte, MaxLayoutBytes+1)}); err == nil {
		t.Fatal("encoded a layout over MaxLayoutBytes")
	}
}

func clip(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}

// answerOf frames entries as a layouts answer by hand, count given separately.
func answerOf(count uint32, entries ...RawLayout) []byte {
	out := binary.LittleEndian.AppendUint32(nil, count)
	for _, e := range entries {
		out = append(out, e.Hash[:]...)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(e.Bytes)))
		out = append(out, e.Bytes...)
	}
	return out
}

func TestDecodeLayouts(t *testing.T) {
	a, b := layoutOf("a"), layoutOf("bb", "cc")
	ea, eb := RawLayout{a.Hash, mustMarshal(t, a)}, RawLayout{b.Hash, mustMarshal(t, b)}
	want := []hash.Hash{a.Hash, b.Hash, hash.Chunk([]byte("absent"))}
	good := answerOf(2, eb, ea)
	got, err := DecodeLayouts(good, want)
	if err != nil || len(got) != 2 || !reflect.DeepEqual(got[a.Hash], a) || !reflect.DeepEqual(got[b.Hash], b) {
		t.Fatalf("good answer: %v %v", got, err)
	}
	if got, err := DecodeLayouts(answerOf(0), want); err != nil || len(got) != 0 {
		t.Fatalf("nothing found: %v %v", got, err)
	}

	c := layoutOf("c")
	unverified := bytes.Clone(ea.Bytes)
	unverified[len(unverified)-1] ^= 1 // a raw end changed: the merkle hash no longer matches
	badEnc := bytes.Clone(ea.Bytes)
	badEnc[0] = 9 // unknown version
	// One entry whose length is MaxLayoutBytes+1, with that many bytes present.
	over := binary.LittleEndian.AppendUint32(nil, 1)
	over = append(over, a.Hash[:]...)
	over = binary.LittleEndian.AppendUint32(over, MaxLayoutBytes+1)
	over = append(over, make([]byte, MaxLayoutBytes+1)...)
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"short count", []byte{1, 0, 0}},
		{"count without entries", answerOf(1)},
		{"count beyond the bytes", binary.LittleEndian.AppendUint32(nil, math.MaxUint32)},
		{"truncated in the head", good[:4+20]},
		{"truncated in the layout", good[:len(good)-1]},
		{"trailing byte", append(bytes.Clone(good), 0)},
		{"fewer entries than counted", answerOf(2, ea)},
		{"more entries than asked", answerOf(4, ea, eb, RawLayout{c.Hash, mustMarshal(t, c)}, ea)},
		{"entry not asked", answerOf(1, RawLayout{c.Hash, mustMarshal(t, c)})},
		{"repeated entry", answerOf(2, ea, ea)},
		{"misnamed entry", answerOf(1, RawLayout{a.Hash, eb.Bytes})},
		{"does not verify", answerOf(1, RawLayout{a.Hash, unverified})},
		{"does not decode", answerOf(1, RawLayout{a.Hash, badEnc})},
		{"empty layout", answerOf(1, RawLayout{a.Hash, nil})},
		{"length over the limit", over},
		{"huge length", binary.LittleEndian.AppendUint32(append(binary.LittleEndian.AppendUint32(nil, 1), a.Hash[:]...), 1<<31)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeLayouts(tc.in, want)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v (decoded %d), want ErrMalformed", err, len(got))
			}
			if got != nil {
				t.Fatal("a result with the error")
			}
		})
	}
	if _, err := DecodeLayouts(answerOf(1, RawLayout{a.Hash, badEnc}), want); !errors.Is(err, xorb.ErrCorrupt) {
		t.Fatalf("undecodable layout: %v, want xorb.ErrCorrupt too", err)
	}
}

// allocBytes reports the bytes f allocates on the heap. The counter is the whole process's (tests
// in this package do not run in parallel, but the test framework's output or a server an earlier
// test left draining may allocate meanwhile, which only adds): f runs five times and the least
// reading is taken. f must do the same each time.
func allocBytes(f func()) uint64 {
	least := uint64(math.MaxUint64)
	for range 5 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// layoutsFromSeed builds 0 to 5 real layouts (and their requests, with repeats and a hash the
// origin does not have) from fuzz input.
func layoutsFromSeed(data []byte) ([]hash.Hash, map[hash.Hash]*xorb.Layout) {
	var want []hash.Hash
	ls := map[hash.Hash]*xorb.Layout{}
	for i := 0; i < len(data) && len(ls) < 5; {
		n := 1 + int(data[i]%4)
		i++
		var chunks []string
		for k := 0; k < n && i < len(data); k++ {
			m := 1 + int(data[i]%16)
			i++
			chunks = append(chunks, string(data[min(i, len(data)):min(i+m, len(data))])+strconv.Itoa(k))
			i += m
		}
		if len(chunks) == 0 {
			break
		}
		l := layoutOf(chunks...)
		ls[l.Hash] = l
		want = append(want, l.Hash)
		if len(data)%2 == 0 {
			want = append(want, l.Hash)
		}
	}
	return append(want, hash.Chunk(data)), ls
}

// FuzzLayouts: arbitrary bytes never panic the decoders nor make them allocate more than a
// small multiple of their input, a framing SplitLayouts accepts is re-encoded byte for byte,
// and layouts built from the input decode, after encoding, to exactly themselves.
func FuzzLayouts(f *testing.F) {
	a, b := layoutOf("a"), layoutOf("bb", "cc")
	f.Add(answerOf(2, RawLayout{a.Hash, mustMarshal(f, a)}, RawLayout{b.Hash, mustMarshal(f, b)}))
	f.Add(answerOf(1, RawLayout{a.Hash, mustMarshal(f, a)}))
	f.Add([]byte{1, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	f.Add([]byte{0x00, 0x04, 0, 0}) // 1,024 entries announced, none present
	f.Add([]byte("three chunks of text and more text to cut into layouts"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Arbitrary bytes.
		var entries []RawLayout
		var splitErr error
		if n := allocBytes(func() { entries, splitErr = SplitLayouts(data, MaxLayoutsPerRequest) }); n > 64*uint64(len(data))+1024 {
			t.Fatalf("SplitLayouts allocated %d bytes for %d bytes of input", n, len(data))
		}
		if splitErr == nil {
			want := make([]hash.Hash, len(entries))
			got := make(map[hash.Hash][]byte, len(entries))
			for i, e := range entries {
				want[i], got[e.Hash] = e.Hash, e.Bytes
			}
			if len(got) == len(entries) { // no repeated hash: the encoding is canonical
				re, err := AppendLayouts(nil, want, got)
				if err != nil || !bytes.Equal(re, data) {
					t.Fatalf("accepted framing does not re-encode: %v\n in  %x\n out %x", err, clip(data), clip(re))
				}
			}
		} else if !errors.Is(splitErr, ErrMalformed) {
			t.Fatalf("SplitLayouts error %v does not wrap ErrMalformed", splitErr)
		}
		asked := []hash.Hash{a.Hash, b.Hash}
		if len(data) >= 4+hash.Size {
			var h hash.Hash
			copy(h[:], data[4:])
			asked = append(asked, h)
		}
		if got, err := DecodeLayouts(data, asked); err == nil {
			for h, l := range got {
				if l.Hash != h || l.Verify() != nil {
					t.Fatalf("accepted a layout that does not verify for %s", h)
				}
			}
		} else if !errors.Is(err, ErrMalformed) {
			t.Fatalf("DecodeLayouts error %v does not wrap ErrMalformed", err)
		}

		// Round trip of real layouts.
		want, ls := layoutsFromSeed(data)
		enc := make(map[hash.Hash][]byte, len(ls))
		for h, l := range ls {
			enc[h] = mustMarshal(t, l)
		}
		answer, err := AppendLayouts(nil, want, enc)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeLayouts(answer, want)
		if err != nil {
			t.Fatalf("decode(encode(x)): %v", err)
		}
		if !reflect.DeepEqual(got, ls) {
			t.Fatalf("decode(encode(x)) = %v, want %v", got, ls)
		}
	})
}

// sampleEvents covers the shapes the origin writes: one file, every file (null), several
// files, special characters in scopes, times in other zones and with a monotonic reading.
func sampleEvents() []Event {
	f1, f2 := hash.Chunk([]byte("f1")), hash.Chunk([]byte("f2"))
	paris := time.FixedZone("CET", 3600)
	return []Event{
		{Seq: 1, Scope: "models/acme/llama", Files: []hash.Hash{f1}, At: time.Date(2026, 12, 1, 15, 4, 5, 0, time.UTC)},
		{Seq: 2, Scope: "datasets/x<y>&z\"q\\\u00e9\u2028", Files: nil, At: time.Date(2026, 12, 1, 16, 4, 5, 123456789, paris)},
		{Seq: 7, Scope: "s", Files: []hash.Hash{f1, f2}, At: time.Now()},
		{Seq: math.MaxInt64, Scope: "last", Files: []hash.Hash{}, At: time.Unix(0, 1)},
	}
}

// TestAppendEventsMatchesOld: the new encoder writes exactly the bytes the origin wrote before.
func TestAppendEventsMatchesOld(t *testing.T) {
	evs := sampleEvents()
	for name, in := range map[string][]Event{
		"nil": nil, "empty": {}, "one": evs[:1], "all": evs, "scope-wide": evs[1:2], "max seq": evs[3:],
	} {
		t.Run(name, func(t *testing.T) {
			got, err := AppendEvents(nil, in)
			if err != nil {
				t.Fatal(err)
			}
			if want := oldEventsAnswer(in); !bytes.Equal(got, want) {
				t.Fatalf("new encoding differs from the old one:\n got  %s\n want %s", got, want)
			}
		})
	}
	if _, err := AppendEvents(nil, []Event{{Seq: 1, Scope: "bad\xff", At: time.Now()}}); err == nil {
		t.Fatal("encoded a scope that is not UTF-8")
	}
	if _, err := AppendEvents(nil, []Event{{Seq: 1, Scope: "s", At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}); err == nil {
		t.Fatal("encoded a year JSON cannot hold")
	}
}

func eventsEqual(a, b []Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Seq != b[i].Seq || a[i].Scope != b[i].Scope || !a[i].At.Equal(b[i].At) ||
			(a[i].Files == nil) != (b[i].Files == nil) || !reflect.DeepEqual(append([]hash.Hash{}, a[i].Files...), append([]hash.Hash{}, b[i].Files...)) {
			return false
		}
	}
	return true
}

func TestDecodeEvents(t *testing.T) {
	evs := sampleEvents()
	enc, err := AppendEvents(nil, evs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeEvents(enc, 0)
	if err != nil || !eventsEqual(got, evs) {
		t.Fatalf("round trip: %v\n got  %+v\n want %+v", err, got, evs)
	}
	if got[1].Files != nil || got[3].Files == nil {
		t.Fatal("null and [] files are not told apart")
	}
	if got, err := DecodeEvents([]byte(`{"events":[]}`+"\n"), 5); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty answer: %v %v", got, err)
	}
	// Fields the origin may add later are ignored.
	if got, err := DecodeEvents([]byte(`{"v":2,"events":[{"seq":3,"scope":"s","files":null,"at":"2026-01-02T03:04:05Z","why":"dmca"}]}`), 0); err != nil || len(got) != 1 {
		t.Fatalf("unknown fields: %v %v", got, err)
	}
	h := hash.Chunk([]byte("f")).String()
	ev := func(fields string) string { return `{"events":[` + fields + `]}` }
	okEv := `{"seq":3,"scope":"s","files":["` + h + `"],"at":"2026-01-02T03:04:05Z"}`
	tests := []struct{ name, in string }{
		{"empty", ``},
		{"not json", `{"events":[`},
		{"truncated", string(enc[:len(enc)/2])},
		{"trailing data", ev(okEv) + `{}`},
		{"not an object", `[]`},
		{"no events", `{}`},
		{"null events", `{"events":null}`},
		{"events not a list", `{"events":{}}`},
		{"event not an object", ev(`3`)},
		{"no seq", ev(`{"scope":"s","files":null,"at":"2026-01-02T03:04:05Z"}`)},
		{"no scope", ev(`{"seq":3,"files":null,"at":"2026-01-02T03:04:05Z"}`)},
		{"no files", ev(`{"seq":3,"scope":"s","at":"2026-01-02T03:04:05Z"}`)},
		{"no at", ev(`{"seq":3,"scope":"s","files":null}`)},
		{"empty scope", ev(`{"seq":3,"scope":"","files":null,"at":"2026-01-02T03:04:05Z"}`)},
		{"seq not after", ev(`{"seq":2,"scope":"s","files":null,"at":"2026-01-02T03:04:05Z"}`)},
		{"seq repeated", ev(okEv + `,` + okEv)},
		{"seq not a number", ev(`{"seq":"3","scope":"s","files":null,"at":"2026-01-02T03:04:05Z"}`)},
		{"seq fractional", ev(`{"seq":3.5,"scope":"s","files":null,"at":"2026-01-02T03:04:05Z"}`)},
		{"seq too big", ev(`{"seq":9223372036854775808,"scope":"s","files":null,"at":"2026-01-02T03:04:05Z"}`)},
		{"bad hash", ev(`{"seq":3,"scope":"s","files":["zz"],"at":"2026-01-02T03:04:05Z"}`)},
		{"files not a list", ev(`{"seq":3,"scope":"s","files":"` + h + `","at":"2026-01-02T03:04:05Z"}`)},
		{"files an object", ev(`{"seq":3,"scope":"s","files":{},"at":"2026-01-02T03:04:05Z"}`)},
		{"bad time", ev(`{"seq":3,"scope":"s","files":null,"at":"yesterday"}`)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeEvents([]byte(tc.in), 2)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v (decoded %+v), want ErrMalformed", err, got)
			}
		})
	}
}

// eventsFromSeed builds up to 8 valid events from fuzz input.
func eventsFromSeed(data []byte, after int64) []Event {
	r := rand.New(rand.NewPCG(uint64(len(data)), binary.LittleEndian.Uint64(append(bytes.Clone(data), make([]byte, 8)...))))
	var evs []Event
	seq := after
	for i := 0; i < len(data) && len(evs) < 8; i += 4 {
		seq += 1 + int64(data[i]%5)
		scope := strings.ToValidUTF8(string(data[i:min(i+4+int(data[i]%12), len(data))]), "?")
		if scope == "" {
			scope = "s"
		}
		var files []hash.Hash
		switch data[i] % 3 {
		case 1:
			files = []hash.Hash{}
		case 2:
			for k := range 1 + int(data[i]%4) {
				files = append(files, hash.Chunk([]byte{data[i], byte(k)}))
			}
		}
		// Any instant JSON can carry (years 1 to 9998), in UTC or another zone.
		at := time.Unix(r.Int64N(253_370_000_000-62_135_596_800)-62_135_596_800+86400, r.Int64N(1e9))
		if data[i]%2 == 0 {
			at = at.In(time.FixedZone("z", 3600*int(data[i]%13)))
		}
		evs = append(evs, Event{Seq: seq, Scope: scope, Files: files, At: at})
	}
	return evs
}

// FuzzEvents: arbitrary bytes never panic DecodeEvents nor make it allocate more than a small
// multiple of its input; what it accepts re-encodes to the same events; and events built from
// the input decode, after encoding, to exactly themselves.
func FuzzEvents(f *testing.F) {
	enc, err := AppendEvents(nil, sampleEvents())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(enc)
	f.Add([]byte(`{"events":[]}`))
	f.Add([]byte(`{"events":[{"seq":3,"scope":"s","files":null,"at":"2026-01-02T03:04:05Z"}]}`))
	f.Add([]byte("\x00\x01abcdefghijklmnopqrstuvwxyz"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got []Event
		var decErr error
		if n := allocBytes(func() { got, decErr = DecodeEvents(data, 0) }); n > 64*uint64(len(data))+16<<10 {
			t.Fatalf("DecodeEvents allocated %d bytes for %d bytes of input", n, len(data))
		}
		if decErr == nil {
			re, err := AppendEvents(nil, got)
			if err != nil {
				t.Fatalf("accepted events do not encode: %v", err)
			}
			again, err := DecodeEvents(re, 0)
			if err != nil || !eventsEqual(again, got) {
				t.Fatalf("accepted events do not round-trip: %v", err)
			}
		} else if !errors.Is(decErr, ErrMalformed) {
			t.Fatalf("error %v does not wrap ErrMalformed", decErr)
		}

		after := int64(len(data))
		evs := eventsFromSeed(data, after)
		enc, err := AppendEvents(nil, evs)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeEvents(enc, after)
		if err != nil {
			t.Fatalf("decode(encode(x)): %v\n%s", err, enc)
		}
		if !eventsEqual(back, evs) {
			t.Fatalf("decode(encode(x)) = %+v, want %+v", back, evs)
		}
		for _, e := range back {
			if e.At.Location() != time.UTC {
				t.Fatalf("decoded time in %v, want UTC", e.At.Location())
			}
		}
	})
}

// recordFromSeed builds a valid file record from fuzz input.
func recordFromSeed(data []byte) *recon.FileRecord {
	rec := &recon.FileRecord{Hash: hash.Chunk(data)}
	if len(data)%2 == 1 {
		s := hash.Chunk(append([]byte("sha"), data...))
		rec.SHA256 = &s
	}
	for i := 0; i+3 < len(data) && len(rec.Terms) < 64; i += 4 {
		start := uint32(data[i]) * 8
		n := 1 + uint32(data[i+1]%32)
		bs := uint32(data[i+2]) << 10
		t := recon.Term{Xorb: hash.Chunk(data[i : i+1]), Start: start, End: start + n, RawBytes: 1 + uint32(data[i+3])<<8,
			ByteStart: bs, ByteEnd: bs + 8*n + uint32(data[i+3])}
		rec.Terms = append(rec.Terms, t)
		rec.Size += uint64(t.RawBytes)
	}
	return rec
}

// FuzzFile: arbitrary bytes never panic DecodeFile nor make it allocate more than a small
// multiple of its input; a record it accepts re-encodes byte for byte; records built from the
// input decode, after encoding, to exactly themselves.
func FuzzFile(f *testing.F) {
	good, err := EncodeFile(recordFromSeed([]byte("0123456789abcdef")))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{1, 0})
	f.Add([]byte("any bytes at all"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var h hash.Hash
		copy(h[:], data[min(2, len(data)):])
		var rec *recon.FileRecord
		var decErr error
		if n := allocBytes(func() { rec, decErr = DecodeFile(data, h) }); n > 64*uint64(len(data))+4096 {
			t.Fatalf("DecodeFile allocated %d bytes for %d bytes of input", n, len(data))
		}
		if decErr == nil {
			re, err := EncodeFile(rec)
			if err != nil {
				t.Fatalf("accepted record does not encode: %v", err)
			}
			back, err := DecodeFile(re, h)
			if err != nil || !recordsEqual(back, rec) {
				t.Fatalf("accepted record does not round-trip: %v", err)
			}
		} else if !errors.Is(decErr, ErrMalformed) {
			t.Fatalf("error %v does not wrap ErrMalformed", decErr)
		}

		want := recordFromSeed(data)
		enc, err := EncodeFile(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeFile(enc, want.Hash)
		if err != nil || !recordsEqual(got, want) {
			t.Fatalf("decode(encode(x)): %v\n got  %+v\n want %+v", err, got, want)
		}
	})
}

func recordsEqual(a, b *recon.FileRecord) bool {
	return a.Hash == b.Hash && a.Size == b.Size && reflect.DeepEqual(a.SHA256, b.SHA256) &&
		len(a.Terms) == len(b.Terms) && (len(a.Terms) == 0 || reflect.DeepEqual(a.Terms, b.Terms))
}

func TestDecodeFile(t *testing.T) {
	want := recordFromSeed([]byte("0123456789abcdefghijkl"))
	good, err := EncodeFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeFile(good, want.Hash); err != nil || !recordsEqual(got, want) {
		t.Fatalf("good answer: %v", err)
	}
	for n := range len(good) {
		if _, err := DecodeFile(good[:n], want.Hash); !errors.Is(err, ErrMalformed) || !errors.Is(err, recon.ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: %v", n, err)
		}
	}
	if _, err := DecodeFile(append(bytes.Clone(good), 0), want.Hash); !errors.Is(err, ErrMalformed) {
		t.Fatalf("trailing byte: %v", err)
	}
	if _, err := DecodeFile(good, hash.Chunk([]byte("other"))); !errors.Is(err, ErrMalformed) {
		t.Fatalf("record of another file: %v", err)
	}
}

// TestTargets: the request targets are the ones the edge sent before this package existed, and
// parse back to what they carry.
func TestTargets(t *testing.T) {
	h1, h2 := hash.Chunk([]byte("1")), hash.Chunk([]byte("2"))
	scope := "models/acme/llama&x=y z/é"
	for _, tc := range []struct{ got, want string }{
		{FileTarget(h1, scope), "/internal/v1/files/" + h1.String() + "?scope=" + url.QueryEscape(scope)},
		{XorbTarget(h1), "/internal/v1/xorbs/" + h1.String()},
		{LayoutsTarget([]hash.Hash{h1, h2, h1}), "/internal/v1/layouts?h=" + h1.String() + "&h=" + h2.String() + "&h=" + h1.String()},
		{EventsTarget(42, 30*time.Second+999*time.Millisecond), "/internal/v1/events?after=42&wait=30"},
		{EventsTarget(0, 0), "/internal/v1/events?after=0&wait=0"},
	} {
		if tc.got != tc.want {
			t.Errorf("target %q, want %q", tc.got, tc.want)
		}
	}
	u, err := url.Parse(FileTarget(h1, scope))
	if err != nil || u.Query().Get(ParamScope) != scope || u.Path != FilesPath+h1.String() {
		t.Fatalf("file target parses to %v %v", u, err)
	}
	u, err = url.Parse(LayoutsTarget([]hash.Hash{h1, h2}))
	if err != nil || u.Path != LayoutsPath || !reflect.DeepEqual(u.Query()[ParamHash], []string{h1.String(), h2.String()}) {
		t.Fatalf("layouts target parses to %v %v", u, err)
	}
	if !utf8.ValidString(FileTarget(h1, "\xff")) {
		t.Fatal("file target is not escaped")
	}
}
