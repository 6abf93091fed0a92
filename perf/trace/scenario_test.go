package trace

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// write returns recs as trace text.
func write(t *testing.T, recs []Record) []byte {
	var b bytes.Buffer
	w := NewWriter(&b)
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestScenarios(t *testing.T) {
	for _, name := range Scenarios {
		t.Run(name, func(t *testing.T) {
			s := DefaultSpec(name)
			s.Duration, s.Repos, s.Regions, s.Scale = 120, 20, []string{"eu", "us"}, 0.001
			recs, err := Generate(s)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := Generate(s)
			if !reflect.DeepEqual(recs, again) {
				t.Fatal("the same spec gave two traces")
			}
			s.Seed++
			if other, _ := Generate(s); reflect.DeepEqual(recs, other) {
				t.Fatal("another seed gave the same trace")
			}
			// What the generator writes, the reader accepts: sorted, consistent, valid.
			text := write(t, recs)
			back, err := ReadAll(bytes.NewReader(text))
			if err != nil {
				t.Fatal(err)
			}
			if len(back) != len(recs) || len(recs) < 20 {
				t.Fatalf("%d records written, %d read", len(recs), len(back))
			}
			ops := map[Op]int{}
			repos := map[string]int{}
			var maxVersion int
			for _, r := range back {
				ops[r.Op]++
				repos[r.Repo]++
				maxVersion = max(maxVersion, r.Version)
				if r.Size > 1<<30 {
					t.Fatalf("scale 0.001 left a %d-byte file", r.Size)
				}
			}
			switch name {
			case ScenarioZipf:
				if ops[Download] == 0 || ops[DownloadRanges] == 0 || ops[Token] == 0 || ops[Upload] != 0 {
					t.Errorf("op mix %v", ops)
				}
				// Zipf: the most popular repository gets far more than an even share.
				top := 0
				for _, n := range repos {
					top = max(top, n)
				}
				if top < 3*len(back)/len(repos) {
					t.Errorf("most popular repository has %d of %d requests over %d repositories", top, len(back), len(repos))
				}
			case ScenarioFinetune:
				if ops[Upload] == 0 || maxVersion < 2 {
					t.Errorf("finetune: %d uploads, newest version %d", ops[Upload], maxVersion)
				}
				// Every version above 0 that is downloaded was uploaded PublishDelay before.
				up := map[FileKey]float64{}
				for _, r := range back {
					k := FileKey{r.Repo, r.File, r.Version}
					if r.Op == Upload {
						up[k] = r.T
						if r.Change < 0.01 || r.Change > 0.1 {
							t.Errorf("change %v outside 1-10 %%", r.Change)
						}
					} else if r.Version > 0 {
						if at, ok := up[k]; !ok || r.T < at+PublishDelay-1e-3 {
							t.Fatalf("%s downloaded at %v, uploaded at %v (%v)", k, r.T, at, ok)
						}
					}
				}
			case ScenarioBurst:
				n := repos["models/burst/new-release"]
				if ops[Upload] == 0 || n < s.Clients*2 {
					t.Errorf("burst: %d uploads, %d lines for the release", ops[Upload], n)
				}
			case ScenarioWholeRepo:
				if ops[Token] == 0 || ops[Download] < 5*ops[Token] {
					t.Errorf("whole-repo: %v", ops)
				}
			}
		})
	}
}

// TestScenarioChangeSpan: a change span is written on every line of a weight file and changes
// nothing else in the trace; the default (1 MiB) writes none.
func TestScenarioChangeSpan(t *testing.T) {
	s := DefaultSpec(ScenarioFinetune)
	s.Duration, s.Repos, s.Scale = 120, 20, 0.001
	plain, err := Generate(s)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(write(t, plain), []byte("change_span")) {
		t.Fatal("the default span wrote change_span")
	}
	s.ChangeSpanMiB = 32
	spans, err := Generate(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ReadAll(bytes.NewReader(write(t, spans)))
	if err != nil || len(back) != len(plain) {
		t.Fatalf("%d records read back, want %d (%v)", len(back), len(plain), err)
	}
	var shards, versions int
	for i, r := range back {
		if strings.HasSuffix(r.File, ".safetensors") != (r.ChangeSpan == 32<<20) {
			t.Fatalf("line %d: %s has change_span %d", i+1, r.File, r.ChangeSpan)
		}
		if r.ChangeSpan != 0 {
			shards++
			if r.Version > 0 {
				versions++
			}
		}
		r.ChangeSpan = 0
		if !reflect.DeepEqual(r, plain[i]) {
			t.Fatalf("line %d: %+v, without a span %+v", i+1, r, plain[i])
		}
	}
	if shards == 0 || versions == 0 {
		t.Errorf("%d weight-file lines, %d of versions above 0", shards, versions)
	}
}

func TestSpecCheck(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Spec)
		flag string
	}{
		{func(s *Spec) { s.Scenario = "nope" }, "-scenario"},
		{func(s *Spec) { s.Duration = 0 }, "-duration"},
		{func(s *Spec) { s.Rate = -1 }, "-rate"},
		{func(s *Spec) { s.Rate, s.Duration = 1e6, 1e3 }, "-rate"},
		{func(s *Spec) { s.Repos = 0 }, "-repos"},
		{func(s *Spec) { s.HeadKiB = -1 }, "-head"},
		{func(s *Spec) { s.HeadKiB = 65537 }, "-head"},
		{func(s *Spec) { s.Zipf = 1 }, "-zipf"},
		{func(s *Spec) { s.Clients = 0 }, "-clients"},
		{func(s *Spec) { s.Scale = 2 }, "-scale"},
		{func(s *Spec) { s.Regions = []string{"EU"} }, "-regions"},
		{func(s *Spec) { s.Regions = nil }, "-regions"},
		{func(s *Spec) { s.ChangeSpanMiB = 0 }, "-change-span"},
		{func(s *Spec) { s.ChangeSpanMiB = 1025 }, "-change-span"},
	} {
		s := DefaultSpec(ScenarioZipf)
		tc.mod(&s)
		err := s.Check()
		if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), tc.flag+":") {
			t.Errorf("Check = %v, want ErrSpec naming %s", err, tc.flag)
		}
		if _, err := Generate(s); err == nil {
			t.Errorf("Generate accepted a spec with a bad %s", tc.flag)
		}
	}
	s := DefaultSpec(ScenarioBurst)
	s.BurstWindow = s.Duration + 1
	if err := s.Check(); err == nil || !strings.Contains(err.Error(), "-burst-window") {
		t.Errorf("burst window longer than the trace: %v", err)
	}
}

func TestConvertLog(t *testing.T) {
	log := `# comment
2026-12-01T10:00:01Z /acme/llama/resolve/main/config.json 200 700 10.0.0.1 eu
2026-12-01T10:00:00Z /api/models/acme/llama/xet-read-token/main 200 300 10.0.0.1 eu
2026-12-01T10:00:02.5Z /models/acme/llama/resolve/abc123/model%2D1.safetensors 206 1000 10.0.0.2
2026-12-01T10:00:03Z /models/acme/llama/resolve/abc123/model-1.safetensors 200 5000
2026-12-01T10:00:04Z /healthz 200 2
2026-12-01T10:00:05Z /acme/llama/resolve/main/missing.bin 404 0
1796119210 /datasets/x/y/resolve/main/d/e.parquet 200 10
`
	var b bytes.Buffer
	st, err := ConvertLog(strings.NewReader(log), NewWriter(&b))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ReadAll(&b)
	if err != nil {
		t.Fatalf("converted trace does not read back: %v\n%s", err, b.String())
	}
	if st.Lines != 7 || st.Records != 5 || st.Skipped["not a file or token path"] != 1 || st.Skipped["status 404"] != 1 || st.Approx206 != 1 {
		t.Fatalf("stats %+v", st)
	}
	want := []Record{
		{T: 0, Op: Token, Repo: "models/acme/llama", Access: "read", Client: "10.0.0.1", Region: "eu"},
		{T: 1, Op: Download, Repo: "models/acme/llama", File: "config.json", Size: 700, Client: "10.0.0.1", Region: "eu"},
		{T: 2.5, Op: DownloadRanges, Repo: "models/acme/llama", File: "model-1.safetensors", Size: 5000, Ranges: [][2]int64{{0, 999}}, Client: "10.0.0.2"},
		{T: 3, Op: Download, Repo: "models/acme/llama", File: "model-1.safetensors", Size: 5000, Client: "log"},
	}
	for i, w := range want {
		if !reflect.DeepEqual(recs[i], w) {
			t.Errorf("record %d = %+v, want %+v", i, recs[i], w)
		}
	}
	for _, tc := range []struct{ line, want string }{
		{"2026-12-01T10:00:00Z /a/b/resolve/main/f 200", "line 1: 3 fields"},
		{"yesterday /a/b/resolve/main/f 200 1", `line 1: field "timestamp"`},
		{"1 /a/b/resolve/main/f OK 1", `line 1: field "status"`},
		{"1 /a/b/resolve/main/f 200 -5", `line 1: field "bytes"`},
		{"1 a/b/resolve/main/f 200 5", `line 1: field "path"`},
		{"1 /a/b/resolve/main/../f 200 5", `line 1: field "path"`},
		{"1 /a/b/resolve/main/f%zz 200 5", `line 1: field "path"`},
		{"1 /a/b/resolve/main/f 200 5 c EU", `line 1: field "region"`},
		{"2026-12-01T10:00:00Z /a/b/resolve/main/f 200 5\n1 /a/b/resolve/main/f 200 5", `line 1: field "timestamp": 1796119199 s after the earliest line (line 2)`},
	} {
		_, err := ConvertLog(strings.NewReader(tc.line), NewWriter(&bytes.Buffer{}))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ConvertLog(%q) = %v, want %q", tc.line, err, tc.want)
		}
	}
}

func FuzzConvertLog(f *testing.F) {
	for _, s := range []string{
		"2026-12-01T10:00:01Z /acme/llama/resolve/main/config.json 200 700 10.0.0.1 eu\n1 /api/models/a/b/xet-read-token/main 200 3\n",
		"1 /models/acme/llama/resolve/abc/model%2D1.safetensors 206 1000 c\n2 /healthz 200 1\n",
		"x\n", "1 / 200 0\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, log []byte) {
		var b bytes.Buffer
		st, err := ConvertLog(bytes.NewReader(log), NewWriter(&b))
		if err != nil {
			var le *LineError
			if !errors.As(err, &le) || le.Line < 1 {
				t.Fatalf("error %v is not a *LineError", err)
			}
			return
		}
		// What the converter writes, the reader accepts, line for line.
		recs, err := ReadAll(&b)
		if err != nil {
			t.Fatalf("converted trace does not read back: %v", err)
		}
		if len(recs) != st.Records {
			t.Fatalf("%d records read, %d written", len(recs), st.Records)
		}
	})
}

// TestScenarioHead: -head gives every line of a weight file a head of 1..N KiB, the same on
// every line naming one version and (almost always) different between versions, adds it to the
// size, and changes nothing else in the trace; the default writes none.
func TestScenarioHead(t *testing.T) {
	s := DefaultSpec(ScenarioFinetune)
	s.Duration, s.Repos, s.Scale = 120, 20, 0.001
	plain, err := Generate(s)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(write(t, plain), []byte(`"head"`)) {
		t.Fatal("the default wrote a head")
	}
	s.HeadKiB = 64
	heads, err := Generate(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ReadAll(bytes.NewReader(write(t, heads))) // also checks one head per version
	if err != nil || len(back) != len(plain) {
		t.Fatalf("%d records read back, want %d (%v)", len(back), len(plain), err)
	}
	byVersion := map[FileKey]int64{}
	for i, r := range back {
		shard := strings.HasSuffix(r.File, ".safetensors")
		if shard != (r.Head > 0) || r.Head > 64<<10 {
			t.Fatalf("line %d: %s has head %d", i+1, r.File, r.Head)
		}
		if r.Head > 0 {
			byVersion[FileKey{r.Repo, r.File, r.Version}] = r.Head
		}
		r.Size -= r.Head
		r.Head = 0
		if !reflect.DeepEqual(r, plain[i]) {
			t.Fatalf("line %d: %+v, without a head %+v", i+1, r, plain[i])
		}
	}
	same, pairs := 0, 0
	for k, h := range byVersion {
		if k.Version == 0 {
			continue
		}
		if prev, ok := byVersion[FileKey{k.Repo, k.File, k.Version - 1}]; ok {
			pairs++
			if prev == h {
				same++
			}
		}
	}
	if pairs == 0 || same > pairs/10 {
		t.Errorf("%d of %d consecutive versions have the same head length", same, pairs)
	}
}
