package trace

import (
	"bytes"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestParseLineGood(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Record
	}{
		{`{"t":0,"op":"download","repo":"models/acme/llama","file":"config.json","size":512,"client":"c1"}`,
			Record{Op: Download, Repo: "models/acme/llama", File: "config.json", Size: 512, Client: "c1"}},
		{`{"t":1.5,"op":"upload","repo":"datasets/a-b/c_d.e","file":"dir/x.safetensors","version":3,"size":10,"change":0.05,"region":"eu-1","client":"c"}`,
			Record{T: 1.5, Op: Upload, Repo: "datasets/a-b/c_d.e", File: "dir/x.safetensors", Version: 3, Size: 10, Change: 0.05, Region: "eu-1", Client: "c"}},
		{`{"t":2,"op":"download_ranges","repo":"models/a/b","file":"f","size":100,"ranges":[[0,7],[8,99]],"client":"c"}`,
			Record{T: 2, Op: DownloadRanges, Repo: "models/a/b", File: "f", Size: 100, Ranges: [][2]int64{{0, 7}, {8, 99}}, Client: "c"}},
		{`{"t":3,"op":"token","repo":"spaces/a/b","client":"c"}`, Record{T: 3, Op: Token, Repo: "spaces/a/b", Access: "read", Client: "c"}},
		{`{"t":4,"op":"upload","repo":"models/a/b","file":"f","version":2,"size":10,"change":0.1,"change_span":33554432,"client":"c"}`,
			Record{T: 4, Op: Upload, Repo: "models/a/b", File: "f", Version: 2, Size: 10, Change: 0.1, ChangeSpan: 32 << 20, Client: "c"}},
		{`{"t":4,"op":"download","repo":"models/a/b","file":"f","size":10,"change_span":1073741824,"client":"c"}`,
			Record{T: 4, Op: Download, Repo: "models/a/b", File: "f", Size: 10, ChangeSpan: 1 << 30, Client: "c"}},
		{`{"t":3,"op":"token","repo":"spaces/a/b","access":"write","client":"c"}`, Record{T: 3, Op: Token, Repo: "spaces/a/b", Access: "write", Client: "c"}},
		{`{"t":5,"op":"upload","repo":"models/a/b","file":"f","version":2,"size":5000,"change":0.1,"head":4096,"client":"c"}`,
			Record{T: 5, Op: Upload, Repo: "models/a/b", File: "f", Version: 2, Size: 5000, Change: 0.1, Head: 4096, Client: "c"}},
		{`{"t":5,"op":"download","repo":"models/a/b","file":"f","size":4096,"head":4096,"client":"c"}`,
			Record{T: 5, Op: Download, Repo: "models/a/b", File: "f", Size: 4096, Head: 4096, Client: "c"}},
	} {
		got, err := ParseLine(1, []byte(tc.line))
		if err != nil {
			t.Errorf("ParseLine(%s): %v", tc.line, err)
			continue
		}
		if !equal(got, tc.want) {
			t.Errorf("ParseLine(%s) = %+v, want %+v", tc.line, got, tc.want)
		}
	}
}

func equal(a, b Record) bool { return reflect.DeepEqual(a, b) }

func TestParseLineBad(t *testing.T) {
	const ok = `"repo":"models/a/b","file":"f","size":100,"client":"c"`
	for _, tc := range []struct{ line, field, msg string }{
		{`not json`, "", "not a JSON object"},
		{`{"t":0,"op":"download",` + ok + `} {}`, "", "more than one JSON value"},
		{`{"op":"download",` + ok + `}`, "t", "missing"},
		{`{"t":-1,"op":"download",` + ok + `}`, "t", "outside"},
		{`{"t":"1","op":"download",` + ok + `}`, "t", "is not a number"},
		{`{"t":0,` + ok + `}`, "op", "missing"},
		{`{"t":0,"op":"delete",` + ok + `}`, "op", `"delete" is not upload`},
		{`{"t":0,"op":"download","repo":"acme/llama","file":"f","size":1,"client":"c"}`, "repo", "want"},
		{`{"t":0,"op":"download","repo":"buckets/a/b","file":"f","size":1,"client":"c"}`, "repo", "type"},
		{`{"t":0,"op":"download","repo":"models/a b/c","file":"f","size":1,"client":"c"}`, "repo", "not allowed"},
		{`{"t":0,"op":"download","repo":"models/a/..","file":"f","size":1,"client":"c"}`, "repo", ". and .."},
		{`{"t":0,"op":"download","repo":"models/a/b","size":1,"client":"c"}`, "file", "missing"},
		{`{"t":0,"op":"download","repo":"models/a/b","file":"../x","size":1,"client":"c"}`, "file", "relative"},
		{`{"t":0,"op":"download","repo":"models/a/b","file":"/x","size":1,"client":"c"}`, "file", "relative"},
		{`{"t":0,"op":"download","repo":"models/a/b","file":"a\u0001","size":1,"client":"c"}`, "file", "control"},
		{`{"t":0,"op":"download","repo":"models/a/b","file":"f","client":"c"}`, "size", "missing"},
		{`{"t":0,"op":"download","repo":"models/a/b","file":"f","size":-1,"client":"c"}`, "size", "outside"},
		{`{"t":0,"op":"download","repo":"models/a/b","file":"f","size":1.5,"client":"c"}`, "size", "whole number"},
		{`{"t":0,"op":"download","repo":"models/a/b","file":"f","size":1}`, "client", "missing"},
		{`{"t":0,"op":"download",` + ok + `,"version":-2}`, "version", "outside"},
		{`{"t":0,"op":"download",` + ok + `,"change":1.5}`, "change", "outside"},
		{`{"t":0,"op":"download",` + ok + `,"change_span":0}`, "change_span", "0 is outside 1048576..1073741824"},
		{`{"t":0,"op":"download",` + ok + `,"change_span":-1048576}`, "change_span", "outside"},
		{`{"t":0,"op":"download",` + ok + `,"change_span":1048577}`, "change_span", "not a multiple of 1048576"},
		{`{"t":0,"op":"download",` + ok + `,"change_span":34603008.5}`, "change_span", "whole number"},
		{`{"t":0,"op":"download",` + ok + `,"change_span":1074790400}`, "change_span", "outside"},
		{`{"t":0,"op":"download",` + ok + `,"change_span":1e30}`, "change_span", "whole number"},
		{`{"t":0,"op":"download",` + ok + `,"change_span":"32"}`, "change_span", "whole number"},
		{`{"t":0,"op":"download",` + ok + `,"region":"EU"}`, "region", "not allowed"},
		{`{"t":0,"op":"download",` + ok + `,"colour":"red"}`, "colour", "unknown field"},
		{`{"t":0,"op":"download",` + ok + `,"ranges":[[0,1]]}`, "ranges", "only allowed"},
		{`{"t":0,"op":"download",` + ok + `,"access":"read"}`, "access", "only allowed on a token"},
		{`{"t":0,"op":"download_ranges",` + ok + `}`, "ranges", "missing or empty"},
		{`{"t":0,"op":"download_ranges",` + ok + `,"ranges":[[5,4]]}`, "ranges", "range 0 [5, 4]"},
		{`{"t":0,"op":"download_ranges",` + ok + `,"ranges":[[0,1],[90,100]]}`, "ranges", "range 1 [90, 100]"},
		{`{"t":0,"op":"download_ranges",` + ok + `,"ranges":[[0]]}`, "ranges", "range 0 has 1 numbers"},
		{`{"t":0,"op":"token","repo":"models/a/b","client":"c","file":"f"}`, "file", "not allowed on a token"},
		{`{"t":0,"op":"token","repo":"models/a/b","client":"c","change_span":1048576}`, "change_span", "not allowed on a token"},
		{`{"t":0,"op":"token","repo":"models/a/b","client":"c","head":10}`, "head", "not allowed on a token"},
		{`{"t":0,"op":"download",` + ok + `,"head":-1}`, "head", "outside 0..67108864"},
		{`{"t":0,"op":"download","repo":"models/a/b","file":"f","size":1099511627776,"head":67108865,"client":"c"}`, "head", "outside 0..67108864"},
		{`{"t":0,"op":"download","repo":"models/a/b","file":"f","size":10,"head":11,"client":"c"}`, "head", "11 bytes is more than the file's 10"},
		{`{"t":0,"op":"download",` + ok + `,"head":1.5}`, "head", "whole number"},
		{`{"t":0,"op":"token","repo":"models/a/b","client":"c","access":"admin"}`, "access", "not read or write"},
	} {
		_, err := ParseLine(7, []byte(tc.line))
		var le *LineError
		if !errors.As(err, &le) {
			t.Errorf("ParseLine(%s) = %v, want a *LineError", tc.line, err)
			continue
		}
		if le.Line != 7 || (tc.msg != "" && (le.Field != tc.field || !strings.Contains(le.Msg, tc.msg))) {
			t.Errorf("ParseLine(%s) = %v, want line 7 field %q with %q", tc.line, err, tc.field, tc.msg)
		}
	}
}

func TestReaderChecksTheTrace(t *testing.T) {
	const a = `{"t":1,"op":"download","repo":"models/a/b","file":"f","size":100,"client":"c"}`
	for _, tc := range []struct{ trace, err string }{
		{a + "\n\n" + `{"t":1,"op":"token","repo":"models/a/b","client":"c"}` + "\n", ""},
		{a + "\n" + `{"t":0.5,"op":"token","repo":"models/a/b","client":"c"}`, `trace line 2: field "t": 0.5 is before`},
		{a + "\n" + `{"t":2,"op":"download","repo":"models/a/b","file":"f","size":101,"client":"c"}`, `trace line 2: field "size": 101, but line 1`},
		{a + "\n" + `{"t":2,"op":"download","repo":"models/a/b","file":"f","size":100,"change":0.1,"client":"c"}`, `trace line 2: field "change"`},
		{a + "\n" + `{"t":2,"op":"download","repo":"models/a/b","file":"f","version":1,"size":101,"client":"c"}`, ""},
		{a + "\n" + `{"t":2,"op":"download","repo":"models/a/b","file":"f","size":100,"change_span":2097152,"client":"c"}`, `trace line 2: field "change_span": 2 MiB, but line 1 gave models/a/b/f@0 change_span 1 MiB`},
		{a + "\n" + `{"t":2,"op":"download","repo":"models/a/b","file":"f","size":100,"change_span":1048576,"client":"c"}`, ""}, // 1 MiB is the default
		{a + "\n" + `{"t":2,"op":"download","repo":"models/a/b","file":"f","version":1,"size":100,"change_span":2097152,"client":"c"}`, ""},
		{a + "\n" + `{"t":2,"op":"download","repo":"models/a/b","file":"f","size":100,"head":7,"client":"c"}`, `trace line 2: field "head": 7, but line 1 gave models/a/b/f@0 head 0`},
		{a + "\n" + `{"t":2,"op":"download","repo":"models/a/b","file":"f","version":1,"size":107,"head":7,"client":"c"}`, ""},
		{a + "\n" + strings.Repeat("x", MaxLineSize+1), "trace line 2: longer than"},
	} {
		recs, err := ReadAll(strings.NewReader(tc.trace))
		if tc.err == "" {
			if err != nil || len(recs) != 2 {
				t.Errorf("ReadAll = %d records, %v; want 2, nil", len(recs), err)
			}
		} else if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ReadAll = %v, want %q", err, tc.err)
		}
	}
}

func TestWriterRoundTrip(t *testing.T) {
	in := []Record{
		{T: 0.1234567, Op: Upload, Repo: "models/a/b", File: "f", Version: 2, Size: 5, Change: 0.25, ChangeSpan: 8 << 20, Client: "c"},
		{T: 1, Op: DownloadRanges, Repo: "models/a/b", File: "f", Version: 2, Size: 5, Change: 0.25, ChangeSpan: 8 << 20, Ranges: [][2]int64{{1, 2}}, Region: "eu", Client: "c"},
		{T: 2, Op: Token, Repo: "models/a/b", Access: "write", Client: "d"},
	}
	var b bytes.Buffer
	w := NewWriter(&b)
	for _, r := range in {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b.Bytes(), []byte(`"change_span":8388608`)) {
		t.Errorf("the change span is not written:\n%s", b.Bytes())
	}
	if c := ContentOf(in[0]); c.ChangeSpan != 8<<20 || c.Change != 0.25 || c.Version != 2 {
		t.Errorf("ContentOf = %+v", c)
	}
	out, err := ReadAll(&b)
	if err != nil {
		t.Fatal(err)
	}
	in[0].T = 0.123457
	for i := range in {
		if !equal(in[i], out[i]) {
			t.Errorf("record %d: %+v, want %+v", i, out[i], in[i])
		}
	}
}

func TestContent(t *testing.T) {
	c := Content{Repo: "models/a/b", File: "model.safetensors", Size: 40*BlockSize + 12345, Change: 0.1}
	all := make([]byte, c.Size)
	if n, err := c.ReadAt(all, 0); n != len(all) || err != nil {
		t.Fatalf("ReadAt = %d, %v", n, err)
	}
	// Stream, pieces at odd offsets and the verifier all agree with ReadAt.
	streamed, err := io.ReadAll(c.Reader())
	if err != nil || !bytes.Equal(streamed, all) {
		t.Fatalf("Reader differs from ReadAt (%v)", err)
	}
	for _, off := range []int64{0, 1, BlockSize - 3, 5*BlockSize + 7, c.Size - 10} {
		p := make([]byte, 2*BlockSize+5)
		n, err := c.ReadAt(p, off)
		want := min(int64(len(p)), c.Size-off)
		if int64(n) != want || (want < int64(len(p)) && err != io.EOF) || !bytes.Equal(p[:n], all[off:off+want]) {
			t.Fatalf("ReadAt(%d) = %d, %v", off, n, err)
		}
	}
	v := NewVerifier(c, 3)
	for p := all[3:]; len(p) > 0; p = p[min(len(p), 777777):] {
		v.Write(p[:min(len(p), 777777)])
	}
	if v.Mismatch != -1 || v.Offset() != c.Size {
		t.Fatalf("verifier: mismatch %d offset %d", v.Mismatch, v.Offset())
	}
	bad := bytes.Clone(all)
	bad[3*BlockSize+11] ^= 1
	v = NewVerifier(c, 0)
	v.Write(bad)
	if v.Mismatch != 3*BlockSize+11 {
		t.Fatalf("verifier found mismatch at %d, want %d", v.Mismatch, 3*BlockSize+11)
	}
	v = NewVerifier(c, 0)
	v.Write(all)
	v.Write([]byte{0})
	if v.Mismatch != c.Size {
		t.Fatalf("a byte past the end: mismatch %d, want %d", v.Mismatch, c.Size)
	}
	// Versions: about Change of the blocks differ from the previous version, the rest are equal.
	prev := all
	for ver := 1; ver <= 3; ver++ {
		c.Version = ver
		cur := make([]byte, c.Size)
		c.ReadAt(cur, 0)
		diff := 0
		for b := int64(0); b*BlockSize < c.Size; b++ {
			e := min((b+1)*BlockSize, c.Size)
			if !bytes.Equal(cur[b*BlockSize:e], prev[b*BlockSize:e]) {
				diff++
			}
		}
		blocks, _ := c.ChangedBlocks()
		if int64(diff) != blocks {
			t.Errorf("version %d: %d blocks differ, ChangedBlocks says %d", ver, diff, blocks)
		}
		if diff == 0 || diff > 12 {
			t.Errorf("version %d: %d of 41 blocks differ at change 0.1", ver, diff)
		}
		prev = cur
	}
	other := Content{Repo: "models/a/b", File: "other", Size: 100}
	o := make([]byte, 100)
	other.ReadAt(o, 0)
	if bytes.Equal(o, all[:100]) {
		t.Error("two files have the same bytes")
	}
}

func TestContentRatio(t *testing.T) {
	// Over many blocks the changed share converges on Change.
	c := Content{Repo: "models/a/b", File: "big", Version: 1, Size: 20000 * BlockSize, Change: 0.05}
	blocks, bytes := c.ChangedBlocks()
	if r := float64(blocks) / 20000; math.Abs(r-0.05) > 0.01 || bytes != blocks*BlockSize {
		t.Fatalf("%d of 20000 blocks changed (%.3f), %d bytes", blocks, r, bytes)
	}
}

func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		`{"t":0,"op":"download","repo":"models/acme/llama","file":"config.json","size":512,"client":"c1"}`,
		`{"t":2,"op":"download_ranges","repo":"models/a/b","file":"f","size":100,"ranges":[[0,7],[8,99]],"client":"c"}`,
		`{"t":3,"op":"token","repo":"spaces/a/b","access":"write","client":"c"}`,
		`{"t":1.5,"op":"upload","repo":"datasets/a/b","file":"d/x","version":3,"size":10,"change":0.05,"region":"eu","client":"c"}`,
		`{"t":1.5,"op":"upload","repo":"models/a/b","file":"w","version":1,"size":10,"change":0.05,"change_span":33554432,"client":"c"}`,
		`{"t":1.5,"op":"upload","repo":"models/a/b","file":"w","version":1,"size":10,"change":0.05,"head":9,"client":"c"}`,
		`{}`, `[]`, `null`, `{"t":1e400}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		rec, err := ParseLine(1, line)
		if err != nil {
			var le *LineError
			if !errors.As(err, &le) || le.Line != 1 {
				t.Fatalf("error %v is not a *LineError of line 1", err)
			}
			return
		}
		// An accepted line survives a round trip through the writer unchanged.
		var b bytes.Buffer
		w := NewWriter(&b)
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		again, err := ParseLine(1, bytes.TrimSpace(b.Bytes()))
		if err != nil {
			t.Fatalf("written line %s does not parse: %v", b.Bytes(), err)
		}
		rec.T = math.Round(rec.T*1e6) / 1e6
		if !equal(rec, again) {
			t.Fatalf("round trip: %+v became %+v", rec, again)
		}
	})
}
