// Command tracegen writes replay traces (perf/README.md, "Traces"): from a named, seeded
// scenario, from a plain access log (-from-log), or checks an existing trace (-check). It prints a
// summary of the trace to stderr.
//
//	tracegen -scenario zipf -duration 60 -rate 20 -scale 0.001 -o zipf.jsonl
//	tracegen -scenario finetune -scale 0.1 -change-span 32 -o finetune.jsonl
//	tracegen -from-log access.log -o mine.jsonl
//	tracegen -check zipf.jsonl
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/xetcdn/xetcdn/perf/trace"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tracegen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d := trace.DefaultSpec(trace.ScenarioZipf)
	var (
		scenario = fs.String("scenario", "", "scenario: "+strings.Join(trace.Scenarios, ", "))
		seed     = fs.Uint64("seed", d.Seed, "random seed: the same flags and seed give the same trace")
		duration = fs.Float64("duration", d.Duration, "seconds of trace")
		rate     = fs.Float64("rate", 0, "requests per second (whole-repo: repository pulls per second); 0: the scenario's default (20; whole-repo 0.5)")
		repos    = fs.Int("repos", d.Repos, "repositories")
		zipf     = fs.Float64("zipf", d.Zipf, "Zipf exponent of repository and file popularity, > 1")
		clients  = fs.Int("clients", 0, "distinct clients; burst: clients pulling the release; 0: the scenario's default (50; burst 200)")
		regions  = fs.String("regions", "", "comma-separated regions the clients are spread over (replay -edge REGION=URL); empty: one, the default endpoint")
		scale    = fs.Float64("scale", d.Scale, "multiply the size of every file above 1 MiB by this (not below 1 MiB), e.g. 0.001 turns 4 GiB shards into 4 MiB")
		window   = fs.Float64("burst-window", d.BurstWindow, "burst: seconds over which the clients arrive")
		every    = fs.Float64("version-every", d.VersionEvery, "finetune: mean seconds between two versions of a repository")
		span     = fs.Int("change-span", d.ChangeSpanMiB, "finetune: MiB (1..1024) a new version replaces in one piece, in aligned runs, as a fine-tune rewrites whole tensors; 1: every 1 MiB block on its own")
		head     = fs.Int("head", d.HeadKiB, "finetune: give every version of a weight file new first bytes of 1..N KiB (0..65536), so versions hold their unchanged blocks at different offsets, as after a resized first tensor; 0: none")
		out      = fs.String("o", "-", "output file; - is stdout")
		fromLog  = fs.String("from-log", "", "convert this access log (TIMESTAMP PATH STATUS BYTES [CLIENT [REGION]] per line) instead of generating")
		check    = fs.String("check", "", "check this trace and print its summary; writes nothing")
	)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: tracegen -scenario NAME [flags] | -from-log FILE | -check FILE")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tracegen: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	modes := 0
	for _, m := range []string{*scenario, *fromLog, *check} {
		if m != "" {
			modes++
		}
	}
	if modes != 1 {
		fmt.Fprintln(stderr, "tracegen: give exactly one of -scenario, -from-log and -check")
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *scenario == "" {
		for _, f := range []string{"seed", "duration", "rate", "repos", "zipf", "clients", "regions", "scale", "burst-window", "version-every", "change-span", "head"} {
			if set[f] {
				fmt.Fprintf(stderr, "tracegen: -%s only applies to -scenario\n", f)
				return 2
			}
		}
	}
	if *check != "" {
		if set["o"] {
			fmt.Fprintln(stderr, "tracegen: -check writes nothing; drop -o")
			return 2
		}
		f, err := os.Open(*check)
		if err != nil {
			fmt.Fprintf(stderr, "tracegen: %v\n", err)
			return 1
		}
		defer f.Close()
		recs, err := trace.ReadAll(f)
		if err != nil {
			fmt.Fprintf(stderr, "tracegen: %s: %v\n", *check, err)
			return 1
		}
		summary(stderr, recs)
		return 0
	}
	w, done, err := output(*out, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "tracegen: %v\n", err)
		return 1
	}
	if *fromLog != "" {
		in, err := os.Open(*fromLog)
		if err != nil {
			fmt.Fprintf(stderr, "tracegen: %v\n", err)
			done(false)
			return 1
		}
		defer in.Close()
		st, err := trace.ConvertLog(in, trace.NewWriter(w))
		if err != nil {
			fmt.Fprintf(stderr, "tracegen: %s: %v\n", *fromLog, err)
			done(false)
			return 1
		}
		fmt.Fprintf(stderr, "tracegen: %d log lines, %d trace lines", st.Lines, st.Records)
		if st.Approx206 > 0 {
			fmt.Fprintf(stderr, ", %d partial (206) answers as ranges from byte 0 (the log has no offsets)", st.Approx206)
		}
		fmt.Fprintln(stderr)
		reasons := make([]string, 0, len(st.Skipped))
		for r := range st.Skipped {
			reasons = append(reasons, r)
		}
		slices.Sort(reasons)
		for _, r := range reasons {
			fmt.Fprintf(stderr, "tracegen: skipped %d lines: %s\n", st.Skipped[r], r)
		}
		return done(true)
	}
	s := d
	s.Scenario, s.Seed, s.Duration, s.Repos, s.Zipf, s.Scale, s.BurstWindow, s.VersionEvery, s.ChangeSpanMiB, s.HeadKiB =
		*scenario, *seed, *duration, *repos, *zipf, *scale, *window, *every, *span, *head
	def := trace.DefaultSpec(*scenario)
	s.Rate, s.Clients = def.Rate, def.Clients
	if set["rate"] {
		s.Rate = *rate
	}
	if set["clients"] {
		s.Clients = *clients
	}
	s.Regions = strings.Split(*regions, ",")
	recs, err := trace.Generate(s)
	if err != nil {
		fmt.Fprintf(stderr, "tracegen: %v\n", err)
		done(false)
		return 2
	}
	tw := trace.NewWriter(w)
	for _, r := range recs {
		if err := tw.Write(r); err != nil {
			fmt.Fprintf(stderr, "tracegen: %v\n", err)
			done(false)
			return 1
		}
	}
	if err := tw.Flush(); err != nil {
		fmt.Fprintf(stderr, "tracegen: %v\n", err)
		done(false)
		return 1
	}
	summary(stderr, recs)
	return done(true)
}

// output opens path ("-": stdout); done(ok) closes it, removing a partial file when !ok, and
// returns the exit status.
func output(path string, stdout io.Writer) (io.Writer, func(ok bool) int, error) {
	if path == "-" {
		return stdout, func(ok bool) int {
			if ok {
				return 0
			}
			return 1
		}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return f, func(ok bool) int {
		err := f.Close()
		if ok && err == nil {
			return 0
		}
		os.Remove(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "tracegen: %v\n", err)
		}
		return 1
	}, nil
}

// summary prints what the trace holds.
func summary(w io.Writer, recs []trace.Record) {
	ops := map[trace.Op]int{}
	files := map[trace.FileKey]bool{}
	var down, up int64
	for _, r := range recs {
		ops[r.Op]++
		if r.Op != trace.Token {
			files[trace.FileKey{Repo: r.Repo, File: r.File, Version: r.Version}] = true
		}
		switch r.Op {
		case trace.Download:
			down += r.Size
		case trace.DownloadRanges:
			for _, g := range r.Ranges {
				down += g[1] - g[0] + 1
			}
		case trace.Upload:
			up += r.Size
		}
	}
	span := 0.0
	if len(recs) > 0 {
		span = recs[len(recs)-1].T
	}
	fmt.Fprintf(w, "tracegen: %d lines over %.1f s: %d download, %d download_ranges, %d upload, %d token; %d file versions; %s to download, %s to upload\n",
		len(recs), span, ops[trace.Download], ops[trace.DownloadRanges], ops[trace.Upload], ops[trace.Token], len(files), human(down), human(up))
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}
