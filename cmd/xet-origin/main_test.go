package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// buildBinary compiles xet-origin once for the test.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(t.TempDir(), "xet-origin")
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the binary: %v", err)
	}
	out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs the origin and returns once it logged that it serves (its listener is bound).
func start(t *testing.T, bin, dataDir, addr string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "--data-dir", dataDir, "--listen", addr)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"msg":"xet-origin serving"`) {
			go io.Copy(io.Discard, stderr) // keep draining the log
			return cmd
		}
	}
	t.Fatalf("origin exited before serving: %v", sc.Err())
	return nil
}

func mint(t *testing.T, bin, dataDir, scope, access string) string {
	t.Helper()
	out, err := exec.Command(bin, "token", "--data-dir", dataDir, "--scope", scope, "--access", access).Output()
	if err != nil {
		t.Fatalf("token: %v", err)
	}
	tok := strings.TrimSpace(string(out))
	if strings.Count(tok, ".") != 2 || strings.ContainsAny(tok, " \n") {
		t.Fatalf("token output %q is not just a JWT", out)
	}
	return tok
}

func call(t *testing.T, method, url, tok string, body []byte, hdr ...string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestAcknowledgedWritesSurviveSIGKILL uploads a file, kills the origin with SIGKILL right after
// the acknowledgements, restarts it on the same data directory and downloads the file back.
func TestAcknowledgedWritesSurviveSIGKILL(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	base := "http://" + addr
	cmd := start(t, bin, dir, addr)
	if st, _ := call(t, "GET", base+"/healthz", "", nil); st != 200 {
		t.Fatalf("healthz %d", st)
	}
	w := mint(t, bin, dir, "models/crash/test", "write")

	// Three xorbs of random chunks; one file over all of them.
	rng := rand.New(rand.NewPCG(7, 7))
	var data []byte
	var leaves []hash.Leaf
	sf := shard.File{}
	sh := &shard.Shard{}
	for x := 0; x < 3; x++ {
		b := xorb.NewBuilder(xorb.LZ4)
		for c := 0; c < 5; c++ {
			raw := make([]byte, 4000+rng.IntN(4000))
			for i := range raw {
				raw[i] = byte('a' + rng.IntN(4))
			}
			h := hash.Chunk(raw)
			b.Add(raw, h)
			data = append(data, raw...)
			leaves = append(leaves, hash.Leaf{Hash: h, Size: uint64(len(raw))})
		}
		body, l := b.Finish()
		if st, ans := call(t, "POST", base+"/v1/xorbs/default/"+l.Hash.String(), w, body); st != 200 {
			t.Fatalf("xorb upload: %d %s", st, ans)
		}
		n := uint32(l.NumChunks())
		sf.Terms = append(sf.Terms, shard.Term{Xorb: l.Hash, RawBytes: l.RawLen(), Start: 0, End: n})
		sf.Verification = append(sf.Verification, hash.Verification(l.ChunkHashes))
		blk := shard.Xorb{Hash: l.Hash, RawBytes: l.RawLen()}
		var s uint32
		for i, ch := range l.ChunkHashes {
			blk.Chunks = append(blk.Chunks, shard.XorbChunk{Hash: ch, RawStart: s, RawLen: l.RawEnds[i] - s})
			s = l.RawEnds[i]
		}
		sh.Xorbs = append(sh.Xorbs, blk)
	}
	sf.Hash = hash.File(leaves)
	sh.Files = []shard.File{sf}
	if st, ans := call(t, "POST", base+"/v2/shards", w, sh.AppendUpload(nil)); st != 200 || !strings.Contains(string(ans), `"type":"result"`) {
		t.Fatalf("shard upload: %d %s", st, ans)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	start(t, bin, dir, addr)
	r := mint(t, bin, dir, "models/crash/test", "read")
	st, ans := call(t, "GET", base+"/v2/reconstructions/"+sf.Hash.String(), r, nil)
	if st != 200 {
		t.Fatalf("reconstruction after restart: %d %s", st, ans)
	}
	var a struct {
		Terms []struct {
			Hash  hash.Hash `json:"hash"`
			Range struct{ Start, End uint32 }
		} `json:"terms"`
		Xorbs map[string][]struct {
			URL    string `json:"url"`
			Ranges []struct {
				Bytes struct{ Start, End uint64 } `json:"bytes"`
			} `json:"ranges"`
		} `json:"xorbs"`
	}
	if err := json.Unmarshal(ans, &a); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for _, term := range a.Terms {
		e := a.Xorbs[term.Hash.String()][0]
		st, body := call(t, "GET", e.URL, "", nil, "Range", fmt.Sprintf("bytes=%d-%d", e.Ranges[0].Bytes.Start, e.Ranges[0].Bytes.End))
		if st != 206 {
			t.Fatalf("transfer after restart: %d %s", st, body)
		}
		cr := xorb.NewChunkReader(bytes.NewReader(body))
		for {
			raw, _, err := cr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, raw...)
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("downloaded %d bytes differ from the %d uploaded", len(got), len(data))
	}
}

// TestGracefulStop checks that SIGTERM drains and exits 0.
func TestGracefulStop(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	cmd := start(t, bin, dir, addr)
	if st, _ := call(t, "GET", "http://"+addr+"/readyz", "", nil); st != 200 {
		t.Fatalf("readyz %d", st)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30 s of SIGTERM")
	}
	if _, err := os.Stat(filepath.Join(dir, "keys", "signing.pem")); err != nil {
		t.Fatalf("signing key: %v", err)
	}
}
