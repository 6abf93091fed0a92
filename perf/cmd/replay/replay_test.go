package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/perf/trace"
)

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-origin", "http://o"}, "-trace: required"},
		{[]string{"-trace", "x"}, "-origin: required"},
		{[]string{"-trace", "x", "-origin", "ftp://o"}, `-origin: "ftp://o" is not an http(s) URL`},
		{[]string{"-trace", "x", "-origin", "http://o", "-edge", "eu=nope"}, `-edge "eu=nope"`},
		{[]string{"-trace", "x", "-origin", "http://o", "-edge", "eu=http://a", "-edge", "eu=http://b"}, `region "eu" given twice`},
		{[]string{"-trace", "x", "-origin", "http://o", "-speed", "0"}, "-speed: 0"},
		{[]string{"-trace", "x", "-origin", "http://o", "-concurrency", "0"}, "-concurrency: 0"},
		{[]string{"-trace", "x", "-origin", "http://o", "-attempts", "0"}, "-attempts: 0"},
		{[]string{"-trace", "x", "-origin", "http://o", "-token", "a", "-token-cmd", "b"}, "give one"},
		{[]string{"-trace", "x", "-origin", "http://o", "-pid", "origin"}, `-pid "origin": want NAME=PID`},
		{[]string{"-trace", "x", "-origin", "http://o", "-origin-metrics", "x"}, `metrics URL "x"`},
		{[]string{"-trace", "x", "-origin", "http://o", "more"}, `unexpected argument "more"`},
	} {
		var se bytes.Buffer
		if code := run(context.Background(), tc.args, &bytes.Buffer{}, &se); code != 2 || !strings.Contains(se.String(), tc.want) {
			t.Errorf("replay %q = %d, %q; want 2 and %q", tc.args, code, se.String(), tc.want)
		}
	}
}

// writeTrace writes recs to a file of the test.
func writeTrace(t *testing.T, recs []trace.Record) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "t.jsonl")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	w := trace.NewWriter(f)
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p
}

func TestTraceRegionWithoutEdge(t *testing.T) {
	p := writeTrace(t, []trace.Record{
		{T: 0, Op: trace.Token, Repo: "models/a/b", Access: "read", Client: "c"},
		{T: 1, Op: trace.Download, Repo: "models/a/b", File: "f", Size: 10, Region: "eu", Client: "c"},
	})
	var se bytes.Buffer
	code := run(context.Background(), []string{"-trace", p, "-origin", "http://127.0.0.1:1"}, &bytes.Buffer{}, &se)
	if code != 2 || !strings.Contains(se.String(), `trace line 2: field "region": no -edge eu=URL`) {
		t.Fatalf("replay = %d, %q", code, se.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, []byte(`{"t":0,"op":"download","repo":"models/a/b","file":"f","size":10,"client":"c","x":1}`+"\n"), 0o644)
	se.Reset()
	code = run(context.Background(), []string{"-trace", bad, "-origin", "http://127.0.0.1:1"}, &bytes.Buffer{}, &se)
	if code != 2 || !strings.Contains(se.String(), `trace line 1: field "x": unknown field`) {
		t.Fatalf("replay = %d, %q", code, se.String())
	}
}

// TestReplayAgainstBinaries replays a small trace against the real origin (SQLite, local disk)
// and edge binaries: files uploaded in the trace and preloaded ones, a new version sharing most
// blocks, whole and ranged downloads through the edge and the origin, a token request. Every
// download is checked byte for byte; the results name no error, and the servers' metrics say
// the edge served bytes it pulled from the origin. Then the same trace against an edge that is
// not there: every download fails as a connection error, the replay keeps going and exits 3.
func TestReplayAgainstBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	origin := testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin")
	edge := testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-edge")
	odir, edir := t.TempDir(), t.TempDir()
	oaddr, oadmin := testenv.FreeAddr(t), testenv.FreeAddr(t)
	eaddr, ehttp, eadmin := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	testenv.Start(t, origin, []string{"--data-dir", odir, "--listen", oaddr, "--admin-listen", oadmin, "--edge-url", "http://" + ehttp},
		testenv.Options{Ready: `"msg":"xet-origin serving"`})
	etok := testenv.Run(t, origin, "token", "--data-dir", odir, "--scope", "edge", "--access", "edge")
	testenv.Start(t, edge, []string{"--origin", "http://" + oaddr, "--origin-token", etok, "--data-dir", edir,
		"--listen", eaddr, "--http-listen", ehttp, "--public-url", "http://" + ehttp, "--admin-listen", eadmin},
		testenv.Options{Ready: `"msg":"xet-edge serving"`})

	const mib = 1 << 20
	w := trace.Record{Repo: "models/acme/w", File: "model.safetensors", Size: 3*mib + 12345, Change: 0.34, Client: "pub"}
	w1 := w
	w1.Version = 1
	cfg := trace.Record{Repo: "models/acme/w", File: "config.json", Size: 700}
	other := trace.Record{Repo: "datasets/acme/d", File: "data/train.parquet", Size: mib + 1}
	at := func(r trace.Record, t float64, op trace.Op, client, region string) trace.Record {
		r.T, r.Op, r.Client, r.Region = t, op, client, region
		return r
	}
	rng := at(w1, 1.2, trace.DownloadRanges, "c2", "eu")
	rng.Ranges = [][2]int64{{0, 7}, {8, 70000}, {2*mib - 5, 3 * mib}}
	recs := []trace.Record{
		at(cfg, 0, trace.Download, "c1", "eu"), // preloaded
		at(w, 0.05, trace.Upload, "pub", ""),
		at(w, 0.1, trace.Download, "c1", "eu"), // waits for the upload if it is not done
		at(other, 0.2, trace.Download, "c3", ""),
		at(w1, 0.5, trace.Upload, "pub", ""),
		{T: 0.6, Op: trace.Token, Repo: "models/acme/w", Access: "read", Client: "c1"},
		at(w1, 1.0, trace.Download, "c2", "eu"),
		rng,
		at(w, 1.3, trace.Download, "c4", "eu"),
		at(cfg, 1.4, trace.Download, "c4", "eu"),
	}
	p := writeTrace(t, recs)
	out := filepath.Join(t.TempDir(), "r.json")
	tokenCmd := origin + " token --data-dir " + odir + " --access write --ttl 1h --scope"
	args := []string{"-trace", p, "-origin", "http://" + oaddr, "-edge", "eu=http://" + ehttp, "-token-cmd", tokenCmd,
		"-origin-metrics", "http://" + oadmin + "/metrics", "-edge-metrics", "http://" + eadmin + "/metrics",
		"-speed", "2", "-out", out, "-progress", "0", "-timeout", "60s"}
	var so, se bytes.Buffer
	if code := run(context.Background(), args, &so, &se); code != 0 {
		t.Fatalf("replay = %d\nstdout: %s\nstderr: %s", code, so.String(), se.String())
	}
	t.Logf("%s", so.String())
	var res results
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Requests != len(recs) || res.Errors != 0 {
		t.Fatalf("%d requests, %d errors", res.Requests, res.Errors)
	}
	want := map[trace.Op]int{trace.Download: 6, trace.DownloadRanges: 1, trace.Upload: 2, trace.Token: 1}
	for op, n := range want {
		if o := res.Ops[op]; o == nil || o.Requests != n || o.P999ms <= 0 || len(o.CDF) == 0 {
			t.Errorf("%s: %+v, want %d requests with latencies", op, o, n)
		}
	}
	dl := res.Ops[trace.Download]
	if wantBytes := 2*w.Size + w1.Size + 2*cfg.Size + other.Size; dl.Bytes != wantBytes {
		t.Errorf("downloaded %d file bytes, want %d", dl.Bytes, wantBytes)
	}
	if rb := res.Ops[trace.DownloadRanges].Bytes; rb != 8+69993+(mib+6) {
		t.Errorf("ranges: %d bytes", rb)
	}
	// Version 1 sends about its changed blocks (and no more than 1.1x them plus the shard),
	// version 0 all of its bytes.
	up := res.Ops[trace.Upload]
	if up.Bytes != 2*w.Size || up.ChangedBytes <= w.Size || up.ChangedBytes >= 2*w.Size || up.TransferBytes > up.ChangedBytes*11/10+64<<10 {
		t.Errorf("uploads: %d file bytes, %d changed, %d sent", up.Bytes, up.ChangedBytes, up.TransferBytes)
	}
	// Their lower bound: all of version 0, version 1's changed blocks and some neighbours; what
	// was sent exceeds it by the xorb and shard framing only.
	if len(res.Uploads) != 2 || up.NewChunkBytes <= up.ChangedBytes || up.NewChunkBytes > up.TransferBytes ||
		up.TransferBytes > up.NewChunkBytes+up.NewChunkBytes/100+16<<10 {
		t.Errorf("uploads: %d new-chunk bytes, %d sent, %d changed; rows %+v", up.NewChunkBytes, up.TransferBytes, up.ChangedBytes, res.Uploads)
	}
	for i, u := range res.Uploads {
		if u.Line == 2 && (u.File != trace.ContentOf(w).String() || u.NewChunks != w.Size || u.Sent < w.Size) {
			t.Errorf("upload %d: %+v, want version 0 (line 2) with all its %d bytes new", i, u, w.Size)
		}
	}
	if len(res.Uploads) == 2 && res.Uploads[0].Line+res.Uploads[1].Line != 2+5 {
		t.Errorf("upload rows name lines %d and %d, want 2 and 5", res.Uploads[0].Line, res.Uploads[1].Line)
	}
	m := res.Server
	if m == nil || m.EdgeServedBytes == nil || *m.EdgeServedBytes <= 0 || m.EdgePulledBytes == nil || m.EdgeHitRatio == nil ||
		m.ObjstoreReadBytes == nil || m.IngestXorbBytes == nil || *m.IngestXorbBytes <= 0 || len(m.ObjstoreCalls) == 0 {
		t.Errorf("server metrics incomplete: %+v", m)
	}

	// The same trace, the edge replaced by a closed port: errors by class, the rest goes on.
	dead := testenv.FreeAddr(t)
	args = []string{"-trace", p, "-origin", "http://" + oaddr, "-edge", "eu=http://" + dead, "-token-cmd", tokenCmd,
		"-speed", "4", "-out", out, "-progress", "0", "-attempts", "1", "-timeout", "30s", "-new-chunks=false"}
	so.Reset()
	se.Reset()
	if code := run(context.Background(), args, &so, &se); code != 3 {
		t.Fatalf("replay against a dead edge = %d, want 3\n%s\n%s", code, so.String(), se.String())
	}
	b, _ = os.ReadFile(out)
	res = results{}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Requests != len(recs) || res.Errors != 6 || res.Ops[trace.Download].ErrorClasses["connection"] != 5 ||
		res.Ops[trace.DownloadRanges].ErrorClasses["connection"] != 1 || res.Ops[trace.Upload].Errors != 0 {
		t.Fatalf("against a dead edge: %d requests, %d errors, download classes %v\n%s", res.Requests, res.Errors,
			res.Ops[trace.Download].ErrorClasses, so.String())
	}
	// The server holds the trace's files since the first run: -new-chunks=false leaves the bound out.
	if up := res.Ops[trace.Upload]; up.NewChunkBytes != 0 || strings.Contains(so.String(), "new-chunk bytes") {
		t.Errorf("with -new-chunks=false: %d new-chunk bytes\n%s", up.NewChunkBytes, so.String())
	}
}

// TestPreloadsPreviousVersion: an upload of version v whose version v-1 the trace neither
// uploads nor downloads gets v-1 preloaded, so that it is measured against a server that has
// the version it changes (the fine-tune traces have such uploads); with -no-preload the trace
// is refused, naming the version.
func TestPreloadsPreviousVersion(t *testing.T) {
	up := trace.Record{T: 1, Op: trace.Upload, Repo: "models/a/b", File: "m.safetensors", Version: 2, Size: 3 << 20, Change: 0.1, ChangeSpan: 2 << 20, Client: "p"}
	p := writeTrace(t, []trace.Record{up})
	c, err := parseFlags([]string{"-trace", p, "-origin", "http://127.0.0.1:1"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := newReplayer(c, []trace.Record{up}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	prev := r.files[trace.FileKey{Repo: up.Repo, File: up.File, Version: 1}]
	if prev == nil || !prev.preload || prev.content.Version != 1 || prev.content.Size != up.Size || prev.content.Change != up.Change || prev.content.ChangeSpan != up.ChangeSpan {
		t.Fatalf("version 1: %+v, want a preload of it", prev)
	}
	if s := r.files[trace.FileKey{Repo: up.Repo, File: up.File, Version: 2}]; s == nil || s.preload {
		t.Fatalf("version 2: %+v, want the trace's upload", s)
	}
	c.preload = false
	if _, err := newReplayer(c, []trace.Record{up}, io.Discard); err == nil || !strings.Contains(err.Error(), "m.safetensors@1") {
		t.Fatalf("with -no-preload: %v", err)
	}
	// With a head of h bytes, the preloaded version has one of (h+1)/2 bytes and the same blocks.
	c.preload = true
	up.Head, up.Size = 1001, 3<<20+1001
	r, err = newReplayer(c, []trace.Record{up}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	prev = r.files[trace.FileKey{Repo: up.Repo, File: up.File, Version: 1}]
	if prev.content.Head != 501 || prev.content.Size != 3<<20+501 {
		t.Fatalf("version 1 of an upload with a 1,001-byte head: head %d, size %d; want 501, %d", prev.content.Head, prev.content.Size, 3<<20+501)
	}
}
