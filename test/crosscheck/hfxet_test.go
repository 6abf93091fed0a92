package crosscheck

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// hfxetScript prints, for every path argument, one JSON line with the file hash and size that
// the real hf_xet wheel computes locally (hash_files: chunking, chunk hashes, merkle, file hash).
const hfxetScript = `
import json, sys, hf_xet
for info in hf_xet.hash_files(sys.argv[1:]):
    print(json.dumps({"file_hash": info.hash, "size": info.file_size}))
`

// TestCrossCheckHFXet runs the `xet hash` binary and hf_xet's own hash_files on the same generated
// inputs and requires the same file hash and size for every one. hf_xet is the client the
// protocol's chunking rule is defined by (docs/protocol.md §4), so here no legacy exception exists.
func TestCrossCheckHFXet(t *testing.T) {
	python := testenv.Require(t, testenv.Python)
	dir := t.TempDir()
	xet := filepath.Join(dir, "xet")
	if out, err := exec.Command("go", "build", "-o", xet, "github.com/xetcdn/xetcdn/cmd/xet").CombinedOutput(); err != nil {
		t.Fatalf("build xet: %v\n%s", err, out)
	}
	ins := inputs()
	paths := make([]string, len(ins))
	for i, in := range ins {
		paths[i] = filepath.Join(dir, in.name)
		if err := os.WriteFile(paths[i], in.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.Command(python, append([]string{"-c", hfxetScript}, paths...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hf_xet.hash_files: %v\n%s", err, stderr.String())
	}
	type result struct {
		FileHash string `json:"file_hash"`
		Size     int64  `json:"size"`
	}
	var want []result
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("bad line from hf_xet: %q: %v", sc.Text(), err)
		}
		want = append(want, r)
	}
	if len(want) != len(ins) {
		t.Fatalf("hf_xet printed %d results for %d files", len(want), len(ins))
	}

	// One run of the CLI over every file prints one JSON line per file, in order.
	cli := exec.Command(xet, append([]string{"hash"}, paths...)...)
	cli.Stderr = &stderr
	got, err := cli.Output()
	if err != nil {
		t.Fatalf("xet hash: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	if len(lines) != len(ins) {
		t.Fatalf("xet hash printed %d lines for %d files", len(lines), len(ins))
	}
	for i, in := range ins {
		var r result
		if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
			t.Fatalf("%s: bad xet hash line: %v", in.name, err)
		}
		if r != want[i] {
			t.Errorf("%s: xet hash gives %+v, hf_xet gives %+v", in.name, r, want[i])
		}
	}
}
