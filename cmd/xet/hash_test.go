package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/shared/xet/chunk"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// splitMix64 is the data generator of the upstream chunker tests (docs/protocol.md §12.1).
func splitMix64(n int, seed uint64) []byte {
	out := make([]byte, 0, n+8)
	s := seed
	for len(out) < n {
		s += 0x9E3779B97F4A7C15
		z := s
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		out = binary.LittleEndian.AppendUint64(out, z^z>>31)
	}
	return out[:n]
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runXet(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

func TestHashGoldenLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, `{"size":0,"sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",` +
			`"file_hash":"0000000000000000000000000000000000000000000000000000000000000000","chunks":[]}` + "\n"},
		// docs/protocol.md §12.2.
		{"hello", []byte("hello world"), `{"size":11,"sha256":"b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9",` +
			`"file_hash":"f15edd43b7e85cfd25e2758ffe13b99fdd09dfa817e8d9f6548722a7a126db7f",` +
			`"chunks":[{"hash":"4e39378b9d359f118190557a1f44130219a54e5fcfa07bd96cf50b466fe651b1","length":11}]}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runXet(t, "hash", writeFile(t, tc.name, tc.data))
			if code != 0 || out != tc.want || errOut != "" {
				t.Fatalf("code %d\nstdout %q\nwant   %q\nstderr %q", code, out, tc.want, errOut)
			}
		})
	}
}

func TestHashSplitMix1MB(t *testing.T) {
	data := splitMix64(1_000_000, 0)
	code, out, errOut := runXet(t, "hash", writeFile(t, "r", data))
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("want exactly one line, got %q", out)
	}
	var got struct {
		Size     int64  `json:"size"`
		SHA256   string `json:"sha256"`
		FileHash string `json:"file_hash"`
		Chunks   []struct {
			Hash   string `json:"hash"`
			Length int    `json:"length"`
		} `json:"chunks"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	// File hash and boundaries from docs/protocol.md §12.1/§12.2.
	if got.Size != 1_000_000 || got.SHA256 != hex.EncodeToString(sum[:]) ||
		got.FileHash != "3d17b2d7d64a0e011b6717a52d9a16bd2c3f05b743fa8adf52a7d75dafab6d89" {
		t.Fatalf("summary %d %s %s", got.Size, got.SHA256, got.FileHash)
	}
	wantEnds := []int{84493, 134421, 144853, 243318, 271793, 336457, 467529, 494581, 582000, 596735,
		616815, 653164, 678202, 724510, 815591, 827760, 958832, 991092, 1000000}
	if len(got.Chunks) != len(wantEnds) {
		t.Fatalf("%d chunks", len(got.Chunks))
	}
	prev := 0
	for i, c := range got.Chunks {
		if c.Length != wantEnds[i]-prev || c.Hash != hash.Chunk(data[prev:wantEnds[i]]).String() {
			t.Fatalf("chunk %d = %+v", i, c)
		}
		prev = wantEnds[i]
	}
	if got.Chunks[0].Hash != "6eca1e7dadaf08cca5d82d318c800f07c2ddcec115a7e8627e5edd9605b94b8d" {
		t.Fatalf("chunk 0 hash %s", got.Chunks[0].Hash)
	}
}

func TestHashSeveralFiles(t *testing.T) {
	a := writeFile(t, "a", []byte("hello world"))
	b := writeFile(t, "b", bytes.Repeat([]byte{59}, 300_000))
	code, out, errOut := runXet(t, "hash", a, b)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"size":11,`) || !strings.Contains(lines[1], `"size":300000,`) {
		t.Fatalf("lines %q", lines)
	}
	_, info, err := chunk.HashAll(bytes.NewReader(bytes.Repeat([]byte{59}, 300_000)))
	if err != nil || !strings.Contains(lines[1], info.FileHash.String()) {
		t.Fatalf("second line lacks the file hash %v (%v)", info.FileHash, err)
	}
}

func TestCommandErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		stderrPart string
	}{
		{"no command", nil, 1, "usage: xet"},
		{"unknown command", []string{"frob"}, 1, `unknown command "frob"`},
		{"hash without file", []string{"hash"}, 1, "no file given"},
		{"hash bad flag", []string{"hash", "-z", "x"}, 1, "flag provided but not defined"},
		{"hash missing file", []string{"hash", missing}, 1, "no such file"},
		{"hash a directory", []string{"hash", t.TempDir()}, 1, "xet hash:"},
		{"version with args", []string{"version", "x"}, 1, "no arguments"},
		{"upload without endpoint", []string{"upload", "f"}, 1, "--endpoint or --token-url is required"},
		{"download without hash", []string{"download"}, 1, "--hash"},
		{"help", []string{"help"}, 0, ""},
		{"hash help", []string{"hash", "-h"}, 0, "usage: xet hash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runXet(t, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.stderrPart) {
				t.Fatalf("code %d (want %d), stderr %q (want it to contain %q)", code, tc.code, errOut, tc.stderrPart)
			}
		})
	}
}

// TestVersion: `xet version` and `xet --version` print the module version, the commit
// ("unknown" when the build has none) and the Go version.
func TestVersion(t *testing.T) {
	re := regexp.MustCompile(`^xet \S+ \(commit \S+, ` + regexp.QuoteMeta(runtime.Version()) + `\)\n$`)
	for _, arg := range []string{"version", "--version"} {
		code, out, _ := runXet(t, arg)
		if code != 0 || !re.MatchString(out) {
			t.Fatalf("%s: code %d, %q; want %s", arg, code, out, re)
		}
	}
}

func TestHashCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var o, e bytes.Buffer
	if code := run(ctx, []string{"hash", writeFile(t, "x", []byte("data"))}, &o, &e); code != 1 || o.Len() != 0 {
		t.Fatalf("code %d, stdout %q", code, o.String())
	}
}
