package trace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
)

// Scenario names, documented in perf/README.md ("Traces").
const (
	// Zipf: downloads (whole files, hf_xet-like ranges) and token requests at a steady
	// Poisson rate; repositories by Zipf popularity, files within them by a second Zipf.
	ScenarioZipf = "zipf"
	// WholeRepo: Poisson arrivals of clients that each pull every file of a Zipf-chosen
	// repository at once (snapshot downloads).
	ScenarioWholeRepo = "whole-repo"
	// Finetune: Zipf downloads while the most popular tenth of the repositories publish new
	// versions of their weight files (every VersionEvery seconds on average) that share 90-99 %
	// of their bytes with the previous version; downloads follow the newest version visible.
	ScenarioFinetune = "finetune"
	// Burst: a new repository is uploaded at 10 % of the duration and, from PublishDelay
	// seconds later, pulled whole by Clients clients of the first region within BurstWindow
	// seconds (most of them early), over Zipf background traffic at Rate.
	ScenarioBurst = "burst"
)

// Scenarios lists the scenario names.
var Scenarios = []string{ScenarioZipf, ScenarioWholeRepo, ScenarioFinetune, ScenarioBurst}

// Spec parameterizes a scenario. The same Spec gives the same trace.
type Spec struct {
	Scenario string
	Seed     uint64
	Duration float64 // seconds of trace
	Rate     float64 // requests (zipf, finetune, burst background) or repository pulls (whole-repo) per second
	Repos    int     // repositories
	Zipf     float64 // Zipf exponent over repositories (and files), > 1
	Clients  int     // distinct clients (burst: clients pulling the new release)
	Regions  []string
	// Scale multiplies the size of every file above 1 MiB (not below 1 MiB), so that a scenario
	// keeps the shape of real repositories at a size the machine can hold.
	Scale float64
	// BurstWindow is the time over which the burst's clients arrive (seconds).
	BurstWindow float64
	// VersionEvery is the mean time between two new versions of a repository (finetune).
	VersionEvery float64
	// ChangeSpanMiB is the change span of the weight files (Content.ChangeSpan) in MiB, 1..1024:
	// a new version replaces aligned runs of this many MiB (finetune). 1, the default, decides
	// every 1 MiB block on its own and writes no change_span: the traces of before the option.
	ChangeSpanMiB int
	// HeadKiB, when positive, gives every version of a weight file a head (Content.Head) of
	// 1..HeadKiB KiB, its length drawn per file and version from the file's identity (finetune):
	// consecutive versions then hold their unchanged blocks at offsets that differ, as after a
	// resized first tensor. 0, the default, writes no head: the traces of before the option.
	HeadKiB int
}

// DefaultSpec returns the defaults of perf/cmd/tracegen for scenario.
func DefaultSpec(scenario string) Spec {
	s := Spec{Scenario: scenario, Seed: 1, Duration: 60, Rate: 20, Repos: 100, Zipf: 1.1, Clients: 50,
		Regions: []string{""}, Scale: 1, BurstWindow: 120, VersionEvery: 60, ChangeSpanMiB: 1}
	if scenario == ScenarioWholeRepo {
		s.Rate = 0.5
	}
	if scenario == ScenarioBurst {
		s.Clients = 200
	}
	return s
}

// ErrSpec is a bad scenario specification.
var ErrSpec = errors.New("trace: bad scenario")

// Check reports the first bad field of s, by its tracegen flag name.
func (s Spec) Check() error {
	bad := func(flag, format string, args ...any) error {
		return fmt.Errorf("%w: -%s: %s", ErrSpec, flag, fmt.Sprintf(format, args...))
	}
	if !slices.Contains(Scenarios, s.Scenario) {
		return bad("scenario", "%q is not one of %s", s.Scenario, strings.Join(Scenarios, ", "))
	}
	switch {
	case !(s.Duration > 0 && s.Duration <= 30*86400):
		return bad("duration", "%v seconds, want (0, 30 days]", s.Duration)
	case !(s.Rate > 0 && s.Rate <= 1e6):
		return bad("rate", "%v per second, want (0, 1e6]", s.Rate)
	case s.Rate*s.Duration > 1e8:
		return bad("rate", "%v per second for %v s is more than 1e8 lines", s.Rate, s.Duration)
	case s.Repos < 1 || s.Repos > 1e7:
		return bad("repos", "%d, want 1..1e7", s.Repos)
	case !(s.Zipf > 1 && s.Zipf <= 10):
		return bad("zipf", "%v, want an exponent in (1, 10]", s.Zipf)
	case s.Clients < 1 || s.Clients > 1e7:
		return bad("clients", "%d, want 1..1e7", s.Clients)
	case !(s.Scale > 0 && s.Scale <= 1):
		return bad("scale", "%v, want (0, 1]", s.Scale)
	case len(s.Regions) == 0:
		return bad("regions", "none")
	case s.Scenario == ScenarioBurst && !(s.BurstWindow > 0 && s.BurstWindow <= s.Duration):
		return bad("burst-window", "%v seconds, want (0, duration]", s.BurstWindow)
	case s.Scenario == ScenarioFinetune && !(s.VersionEvery > 0 && s.VersionEvery <= s.Duration):
		return bad("version-every", "%v seconds, want (0, duration]", s.VersionEvery)
	case s.ChangeSpanMiB < 1 || s.ChangeSpanMiB > MaxChangeSpan/BlockSize:
		return bad("change-span", "%d MiB, want 1..%d", s.ChangeSpanMiB, MaxChangeSpan/BlockSize)
	case s.HeadKiB < 0 || s.HeadKiB > MaxHead>>10:
		return bad("head", "%d KiB, want 0..%d", s.HeadKiB, MaxHead>>10)
	}
	for _, r := range s.Regions {
		if err := checkRegion(r); err != nil {
			return bad("regions", "%q: %v", r, err)
		}
	}
	return nil
}

// repoFile is a file of a generated repository.
type repoFile struct {
	name   string
	size   int64
	change float64 // finetune: weight files change by this share per version
	shard  bool    // a safetensors weight file (ranges read its header; versions change it)
}

type repo struct {
	name     string
	files    []repoFile
	version  int       // newest version of the weight files uploaded
	visible  int       // newest version downloads ask for
	releases []float64 // finetune: when each version after 0 becomes visible
	fzipf    *rand.Zipf
}

// PublishDelay is how long after its upload starts a new version is downloaded (finetune): the
// time a publisher takes to upload and announce it.
const PublishDelay = 10

// generator holds the state of one Generate call.
type generator struct {
	s     Spec
	rng   *rand.Rand
	repos []*repo
	rz    *rand.Zipf
	out   []Record
}

// logUniform draws from [lo, hi] with a log-uniform density.
func (g *generator) logUniform(lo, hi float64) float64 {
	return math.Exp(math.Log(lo) + g.rng.Float64()*(math.Log(hi)-math.Log(lo)))
}

func (g *generator) scaled(n float64) int64 {
	if n > 1<<20 {
		n = max(1<<20, n*g.s.Scale)
	}
	return int64(n)
}

// newRepo builds repository i with the shape of a model repository: small JSON configs, a
// README, a tokenizer of a few MB and 1-8 safetensors shards of 1-10 GiB.
func (g *generator) newRepo(i int) *repo {
	r := &repo{name: fmt.Sprintf("models/org%d/model-%d", i%97, i)}
	add := func(name string, size float64, shard bool) {
		r.files = append(r.files, repoFile{name: name, size: g.scaled(size), shard: shard})
	}
	add("config.json", g.logUniform(500, 4<<10), false)
	add("generation_config.json", g.logUniform(100, 500), false)
	add("tokenizer_config.json", g.logUniform(1<<10, 50<<10), false)
	add("special_tokens_map.json", g.logUniform(200, 1<<10), false)
	add("README.md", g.logUniform(1<<10, 30<<10), false)
	add("tokenizer.json", g.logUniform(2<<20, 20<<20), false)
	n := 1 << g.rng.IntN(4) // 1, 2, 4 or 8 shards
	if n > 1 {
		add("model.safetensors.index.json", g.logUniform(20<<10, 100<<10), false)
	}
	change := 0.01 + 0.09*g.rng.Float64() // finetunes share 90-99 %
	for k := 1; k <= n; k++ {
		name := "model.safetensors"
		if n > 1 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", k, n)
		}
		add(name, g.logUniform(1<<30, 10<<30), true)
		r.files[len(r.files)-1].change = change
	}
	r.fzipf = rand.NewZipf(g.rng, g.s.Zipf, 1, uint64(len(r.files)-1))
	return r
}

func (g *generator) client() string { return fmt.Sprintf("c%d", g.rng.IntN(g.s.Clients)) }

func (g *generator) region() string { return g.s.Regions[g.rng.IntN(len(g.s.Regions))] }

func (g *generator) rec(t float64, op Op, r *repo, f *repoFile, client, region string) Record {
	rec := Record{T: t, Op: op, Repo: r.name, Client: client, Region: region}
	if f != nil {
		rec.File, rec.Size = f.name, f.size
		if f.shard {
			rec.Version, rec.Change = r.visible, f.change
			if g.s.ChangeSpanMiB > 1 {
				rec.ChangeSpan = int64(g.s.ChangeSpanMiB) * BlockSize
			}
			if op == Upload {
				rec.Version = r.version
			}
			if g.s.HeadKiB > 0 {
				rec.Head = headOf(g.s.Seed, r.name, f.name, rec.Version, g.s.HeadKiB)
				rec.Size += rec.Head
			}
		}
	}
	return rec
}

// ranges returns what hf_xet-style partial reads ask of f: a safetensors header (the 8-byte
// length, then the JSON header), or one slice of a few MiB at a random place.
func (g *generator) ranges(f *repoFile) [][2]int64 {
	if f.size < 16 {
		return [][2]int64{{0, f.size - 1}}
	}
	if f.shard && g.rng.IntN(2) == 0 {
		hdr := min(f.size-1, 8+int64(g.logUniform(16<<10, 256<<10)))
		return [][2]int64{{0, 7}, {8, hdr}}
	}
	n := min(f.size, int64(g.logUniform(64<<10, 16<<20)))
	a := g.rng.Int64N(f.size - n + 1)
	return [][2]int64{{a, a + n - 1}}
}

// request appends one Zipf request at t: 75 % whole-file download, 20 % ranges, 5 % token.
func (g *generator) request(t float64) {
	r := g.repos[g.rz.Uint64()]
	for len(r.releases) > r.visible && r.releases[r.visible] <= t {
		r.visible++
	}
	f := &r.files[r.fzipf.Uint64()]
	client, region := g.client(), g.region()
	switch p := g.rng.Float64(); {
	case p < 0.75:
		g.out = append(g.out, g.rec(t, Download, r, f, client, region))
	case p < 0.95:
		rec := g.rec(t, DownloadRanges, r, f, client, region)
		rec.Ranges = g.ranges(f)
		g.out = append(g.out, rec)
	default:
		rec := g.rec(t, Token, r, nil, client, region)
		rec.Access = "read"
		g.out = append(g.out, rec)
	}
}

// pull appends a whole-repository download by client at t: a token, then every file (each
// a microsecond after the previous, as a snapshot download starts them).
func (g *generator) pull(t float64, r *repo, client, region string) {
	rec := g.rec(t, Token, r, nil, client, region)
	rec.Access = "read"
	g.out = append(g.out, rec)
	for i := range r.files {
		g.out = append(g.out, g.rec(t+float64(i+1)*1e-6, Download, r, &r.files[i], client, region))
	}
}

// upload appends the upload of r's files (weights only when only is true) by a publisher.
func (g *generator) upload(t float64, r *repo, weightsOnly bool) {
	client := "publisher-" + strings.ReplaceAll(r.name, "/", "-")
	for i := range r.files {
		if weightsOnly && !r.files[i].shard {
			continue
		}
		g.out = append(g.out, g.rec(t, Upload, r, &r.files[i], client, ""))
		t += 1e-6
	}
}

// poisson calls fn at the arrival times of a Poisson process of rate over [from, to).
func (g *generator) poisson(from, to, rate float64, fn func(t float64)) {
	for t := from + g.rng.ExpFloat64()/rate; t < to; t += g.rng.ExpFloat64() / rate {
		fn(t)
	}
}

// Generate returns the trace of s, sorted by offset. s must pass Check.
func Generate(s Spec) ([]Record, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	g := &generator{s: s, rng: rand.New(rand.NewPCG(s.Seed, 0x7ace))}
	g.repos = make([]*repo, s.Repos)
	for i := range g.repos {
		g.repos[i] = g.newRepo(i)
	}
	g.rz = rand.NewZipf(g.rng, s.Zipf, 1, uint64(s.Repos-1))
	switch s.Scenario {
	case ScenarioZipf:
		g.poisson(0, s.Duration, s.Rate, g.request)
	case ScenarioWholeRepo:
		g.poisson(0, s.Duration, s.Rate, func(t float64) {
			g.pull(t, g.repos[g.rz.Uint64()], g.client(), g.region())
		})
	case ScenarioFinetune:
		// Requests and version releases interleaved in time order: a release changes what the
		// requests after it download.
		// The most popular tenth of the repositories (at least one) publish versions.
		next := make([]float64, max(1, len(g.repos)/10))
		for i := range next {
			next[i] = g.rng.ExpFloat64() * s.VersionEvery
		}
		g.poisson(0, s.Duration, s.Rate, func(t float64) {
			for i := range next {
				r := g.repos[i]
				for next[i] <= t {
					r.version++
					r.releases = append(r.releases, next[i]+PublishDelay)
					g.upload(next[i], r, true)
					next[i] += g.rng.ExpFloat64() * s.VersionEvery
				}
			}
			g.request(t)
		})
	case ScenarioBurst:
		release := g.newRepo(len(g.repos))
		release.name = "models/burst/new-release"
		at := 0.1 * s.Duration
		region := s.Regions[0]
		g.poisson(0, s.Duration, s.Rate, g.request)
		g.upload(at, release, false)
		// Arrivals concentrate early in the window (most clients pull soon after the release).
		for c := range s.Clients {
			t := at + PublishDelay + min(s.BurstWindow, g.rng.ExpFloat64()*s.BurstWindow/4)
			g.pull(t, release, fmt.Sprintf("burst-%d", c), region)
		}
	}
	slices.SortStableFunc(g.out, func(a, b Record) int {
		switch {
		case a.T < b.T:
			return -1
		case a.T > b.T:
			return 1
		}
		return 0
	})
	for i := range g.out {
		g.out[i].T = math.Round(g.out[i].T*1e6) / 1e6
	}
	return g.out, nil
}

// headOf is the head length of version v of a weight file: 1..kib KiB, a pure function of the
// trace's seed and the file version (every line naming it agrees) that draws nothing from the
// generator's random stream (the rest of the trace is the same with or without heads).
func headOf(seed uint64, repo, file string, v, kib int) int64 {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(v))
	h.Write(b[:])
	h.Write([]byte(repo))
	h.Write([]byte{0})
	h.Write([]byte(file))
	return 1 + int64(h.Sum64()%(uint64(kib)<<10))
}
