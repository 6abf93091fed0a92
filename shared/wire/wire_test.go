package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// h1 is a hash whose string form is not naive hex of its bytes (the words are byte-reversed).
var h1 = func() hash.Hash {
	var h hash.Hash
	for i := range h {
		h[i] = byte(i)
	}
	return h
}()

const h1s = "07060504030201000f0e0d0c0b0a090817161514131211101f1e1d1c1b1a1918"

func TestDecodeV2(t *testing.T) {
	good := `{"offset_into_first_range":7,"terms":[{"hash":"` + h1s + `","unpacked_length":263873,"range":{"start":0,"end":4}}],` +
		`"xorbs":{"` + h1s + `":[{"url":"https://x/y","ranges":[{"chunks":{"start":0,"end":4},"bytes":{"start":0,"end":131071}}]}]},"extra":1}`
	r, err := DecodeV2([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if r.OffsetIntoFirstRange != 7 || len(r.Terms) != 1 || r.Terms[0].Hash != h1 || r.Terms[0].UnpackedLength != 263873 ||
		r.Xorbs[h1][0].Ranges[0].Bytes.End != 131071 || r.Xorbs[h1][0].URL != "https://x/y" {
		t.Fatalf("decoded %+v", r)
	}
	if _, err := DecodeV2([]byte(`{"offset_into_first_range":0,"terms":[],"xorbs":{}}`)); err != nil {
		t.Fatalf("empty answer: %v", err)
	}
	bad := []struct{ name, body string }{
		{"not json", `{`},
		{"missing offset", `{"terms":[],"xorbs":{}}`},
		{"missing terms", `{"offset_into_first_range":0,"xorbs":{}}`},
		{"null xorbs", `{"offset_into_first_range":0,"terms":[],"xorbs":null}`},
		{"bad hash", `{"offset_into_first_range":0,"terms":[{"hash":"zz","unpacked_length":1,"range":{"start":0,"end":1}}],"xorbs":{}}`},
		{"uncovered term", strings.Replace(good, `"chunks":{"start":0,"end":4}`, `"chunks":{"start":0,"end":3}`, 1)},
		{"term of unknown xorb", strings.Replace(good, `"xorbs":{"`+h1s, `"xorbs":{"`+strings.Repeat("0", 64), 1)},
		{"entry without ranges", strings.Replace(good, `"ranges":[{"chunks":{"start":0,"end":4},"bytes":{"start":0,"end":131071}}]`, `"ranges":[]`, 1)},
		{"empty term range", strings.Replace(good, `"range":{"start":0,"end":4}`, `"range":{"start":4,"end":4}`, 1)},
		{"unsorted ranges", `{"offset_into_first_range":0,"terms":[],"xorbs":{"` + h1s + `":[{"url":"u","ranges":[` +
			`{"chunks":{"start":5,"end":6},"bytes":{"start":9,"end":10}},{"chunks":{"start":0,"end":1},"bytes":{"start":0,"end":8}}]}]}}`},
		{"negative number", strings.Replace(good, `"unpacked_length":263873`, `"unpacked_length":-1`, 1)},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeV2([]byte(tc.body)); !errors.Is(err, ErrShape) {
				t.Fatalf("err = %v, want ErrShape", err)
			}
		})
	}
}

func TestV1ToV2(t *testing.T) {
	body := `{"offset_into_first_range":3,"terms":[{"hash":"` + h1s + `","unpacked_length":10,"range":{"start":1,"end":3}}],` +
		`"fetch_info":{"` + h1s + `":[{"range":{"start":1,"end":3},"url":"u1","url_range":{"start":100,"end":299}}]}}`
	var v1 QueryReconstructionResponse
	if err := json.Unmarshal([]byte(body), &v1); err != nil {
		t.Fatal(err)
	}
	v2 := v1.ToV2()
	if err := v2.Validate(); err != nil {
		t.Fatal(err)
	}
	e := v2.Xorbs[h1]
	if v2.OffsetIntoFirstRange != 3 || len(e) != 1 || e[0].URL != "u1" || len(e[0].Ranges) != 1 ||
		e[0].Ranges[0].Chunks != (ChunkRange{1, 3}) || e[0].Ranges[0].Bytes != (ByteRange{100, 299}) {
		t.Fatalf("converted %+v", v2)
	}
}

func TestFrameShapes(t *testing.T) {
	tests := []struct {
		v    any
		want string
	}{
		{Validating(0, 512), `{"type":"validating","verified":0,"total":512}`},
		{Committing(StageSyncing), `{"type":"committing","stage":"syncing"}`},
		{Result(ShardExists), `{"type":"result","result":0}`},
		{Error("bad shard", false), `{"type":"error","message":"bad shard","retryable":false}`},
		{Heartbeat(), `{"type":"heartbeat"}`},
		{UploadXorbResponse{WasInserted: false}, `{"was_inserted":false}`},
		{UploadShardResponse{Result: ShardSyncPerformed}, `{"result":1}`},
		{Token{CasURL: "https://cas", Exp: 17, AccessToken: "t"}, `{"casUrl":"https://cas","exp":17,"accessToken":"t"}`},
		{ErrorBody{Error: "no such file", Code: "not_found"}, `{"error":"no such file","code":"not_found"}`},
		{BatchQueryReconstructionResponse{
			Files:     map[hash.Hash][]Term{h1: {{Hash: h1, UnpackedLength: 9, Range: ChunkRange{0, 2}}}},
			FetchInfo: map[hash.Hash][]FetchInfo{h1: {{Range: ChunkRange{0, 2}, URL: "u", URLRange: ByteRange{0, 99}}}}},
			`{"files":{"` + h1s + `":[{"hash":"` + h1s + `","unpacked_length":9,"range":{"start":0,"end":2}}]},` +
				`"fetch_info":{"` + h1s + `":[{"range":{"start":0,"end":2},"url":"u","url_range":{"start":0,"end":99}}]}}`},
	}
	for _, tc := range tests {
		got, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("got %s, want %s", got, tc.want)
		}
	}
}

func TestFrameDecode(t *testing.T) {
	lines := []string{
		`{"type":"validating","verified":256,"total":512}`,
		`{"type":"result","result":0}`,
		`{"type":"error","message":"m"}`,
		`{"type":"something-new","x":1}`,
	}
	var fs []Frame
	for _, l := range lines {
		var f Frame
		if err := json.Unmarshal([]byte(l), &f); err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	if fs[0].Verified != 256 || fs[0].Total != 512 || fs[0].Terminal() {
		t.Errorf("validating frame %+v", fs[0])
	}
	if fs[1].Result == nil || *fs[1].Result != 0 || !fs[1].Terminal() {
		t.Errorf("result frame %+v", fs[1])
	}
	if fs[2].Message != "m" || fs[2].Retryable || !fs[2].Terminal() {
		t.Errorf("error frame %+v", fs[2])
	}
	if fs[3].Terminal() {
		t.Errorf("unknown frame is terminal")
	}
}

func FuzzDecodeV2(f *testing.F) {
	f.Add([]byte(`{"offset_into_first_range":0,"terms":[],"xorbs":{}}`))
	f.Add([]byte(`{"offset_into_first_range":7,"terms":[{"hash":"` + h1s + `","unpacked_length":1,"range":{"start":0,"end":4}}],` +
		`"xorbs":{"` + h1s + `":[{"url":"u","ranges":[{"chunks":{"start":0,"end":4},"bytes":{"start":0,"end":1}}]}]}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeV2(data)
		if err != nil {
			if !errors.Is(err, ErrShape) {
				t.Fatalf("error %v does not wrap ErrShape", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted answer fails Validate: %v", err)
		}
		// An accepted answer survives a re-encode.
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeV2(b); err != nil {
			t.Fatalf("re-encoded answer rejected: %v", err)
		}
	})
}
