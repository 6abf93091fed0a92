package xetclient_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/xet/chunk"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// origin is a real xet-origin process on loopback, built from this checkout.
type origin struct {
	url      string
	dataDir  string
	bin, cli string // the built xet-origin and xet binaries
}

// startOrigin builds cmd/xet-origin and cmd/xet, starts the origin on a free loopback port with
// its embedded defaults (SQLite index, local-disk objects) and stops it when the test ends.
func startOrigin(t *testing.T) *origin {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test builds and runs the origin binary")
	}
	addr := testenv.FreeAddr(t)
	o := &origin{url: "http://" + addr, dataDir: t.TempDir(),
		bin: testenv.Build(t, "../../cmd/xet-origin"), cli: testenv.Build(t, "../../cmd/xet")}
	testenv.Start(t, o.bin, []string{"--data-dir", o.dataDir, "--listen", addr}, testenv.Options{
		Healthy: o.url + "/readyz", StartTimeout: 30 * time.Second, StopTimeout: 20 * time.Second})
	return o
}

// token mints a token with `xet-origin token`.
func (o *origin) token(t *testing.T, scope, access string) string {
	t.Helper()
	return testenv.Run(t, o.bin, "token", "--data-dir", o.dataDir, "--scope", scope, "--access", access)
}

func TestE2EOrigin(t *testing.T) {
	o := startOrigin(t)
	const scope = "models/acme/e2e"
	write, read := o.token(t, scope, "write"), o.token(t, scope, "read")
	client := func(tok string, mut func(*xetclient.Options)) *xetclient.Client {
		return newClient(t, o.url, func(opts *xetclient.Options) {
			opts.Token = tok
			opts.BlockSize = 16<<20 + 4321 // several blocks per large file, boundaries inside chunks
			if mut != nil {
				mut(opts)
			}
		})
	}
	up := client(write, nil)

	files := [][]byte{
		{},
		{'a'},
		[]byte("hello world"),
		textBytes(30, 5<<20),
		randBytes(31, 70<<20), // two xorbs
		randBytes(32, 300<<10),
	}
	files = append(files, files[3]) // the same content twice in one session
	res := upload(t, up, files...)
	for i, r := range res {
		_, info, err := chunk.HashAll(bytes.NewReader(files[i]))
		if err != nil || r.FileHash != info.FileHash {
			t.Fatalf("file %d: hash %s, want %s (%v)", i, r.FileHash, info.FileHash, err)
		}
	}
	if res[6].BytesSent != 0 {
		t.Errorf("duplicate file sent %d bytes", res[6].BytesSent)
	}

	down := client(read, nil)
	t.Run("whole files", func(t *testing.T) {
		for i, r := range res {
			if got := download(t, down, r.FileHash, xetclient.DownloadOptions{}); !bytes.Equal(got, files[i]) {
				t.Fatalf("file %d (%d bytes): Writer download differs (%d bytes)", i, len(files[i]), len(got))
			}
			var at memAt
			n, err := down.DownloadAt(context.Background(), r.FileHash, &at, xetclient.DownloadOptions{Size: r.Size})
			if err != nil || n != r.Size || !bytes.Equal(at.buf, files[i]) {
				t.Fatalf("file %d: DownloadAt n=%d err=%v", i, n, err)
			}
		}
	})
	t.Run("ranges", func(t *testing.T) {
		big := files[4]
		size := int64(len(big))
		for _, rg := range [][2]int64{{0, 0}, {1, 1 << 20}, {64<<20 - 100, 64<<20 + 100}, {size - 1, size + 100},
			{33 << 20, 1<<62 - 1}, {12345, 12345 + 65536*3}} {
			got := download(t, down, res[4].FileHash, xetclient.DownloadOptions{Range: &rg})
			if !bytes.Equal(got, big[rg[0]:min(rg[1]+1, size)]) {
				t.Fatalf("range %v differs (%d bytes)", rg, len(got))
			}
		}
		_, err := down.Download(context.Background(), res[4].FileHash, &bytes.Buffer{},
			xetclient.DownloadOptions{Range: &[2]int64{size, size + 1}})
		if !errors.Is(err, xetclient.ErrRangeNotSatisfiable) {
			t.Fatalf("past EOF: %v", err)
		}
	})
	t.Run("not found", func(t *testing.T) {
		_, err := down.Download(context.Background(), randHash(), &bytes.Buffer{}, xetclient.DownloadOptions{})
		if !errors.Is(err, xetclient.ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
	})
	t.Run("global dedup", func(t *testing.T) {
		edited := bytes.Clone(files[5])
		copy(edited[150<<10:], "edited")
		r := upload(t, client(write, nil), edited)[0] // a new session
		if r.BytesSent > int64(len(edited))/3 {
			t.Errorf("edited file sent %d of %d bytes", r.BytesSent, len(edited))
		}
		if got := download(t, down, r.FileHash, xetclient.DownloadOptions{}); !bytes.Equal(got, edited) {
			t.Fatal("edited file differs")
		}
	})
	t.Run("read token cannot upload", func(t *testing.T) {
		_, err := down.UploadFiles(context.Background(), []xetclient.UploadFile{{Reader: bytes.NewReader(randBytes(33, 1000))}}, xetclient.UploadOptions{})
		var se *xetclient.StatusError
		if !errors.As(err, &se) || se.Status != http.StatusForbidden {
			t.Fatalf("err = %v, want 403", err)
		}
	})
	t.Run("token route", func(t *testing.T) {
		c, err := xetclient.New(xetclient.Options{
			TokenURL:    o.url + "/api/" + scope + "/xet-write-token/main",
			TokenHeader: http.Header{"Authorization": {"Bearer " + write}},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		data := textBytes(34, 200<<10)
		r := upload(t, c, data)[0]
		if got := download(t, c, r.FileHash, xetclient.DownloadOptions{}); !bytes.Equal(got, data) {
			t.Fatal("differs")
		}
	})
	t.Run("cli", func(t *testing.T) {
		dir := t.TempDir()
		in := filepath.Join(dir, "in.bin")
		data := append(textBytes(35, 3<<20), randBytes(36, 2<<20)...)
		if err := os.WriteFile(in, data, 0o600); err != nil {
			t.Fatal(err)
		}
		xet := o.cli
		out, err := exec.Command(xet, "upload", "--endpoint", o.url, "--token", write, in).Output()
		if err != nil {
			t.Fatalf("xet upload: %v", err)
		}
		var line struct {
			Path      string `json:"path"`
			FileHash  string `json:"file_hash"`
			Size      int64  `json:"size"`
			SHA256    string `json:"sha256"`
			BytesSent int64  `json:"bytes_sent"`
		}
		if err := json.Unmarshal(out, &line); err != nil {
			t.Fatalf("upload output %q: %v", out, err)
		}
		sum := sha256.Sum256(data)
		if line.Path != in || line.Size != int64(len(data)) || line.SHA256 != hex.EncodeToString(sum[:]) || line.BytesSent <= 0 {
			t.Fatalf("upload line %+v", line)
		}
		got := filepath.Join(dir, "out.bin")
		for _, args := range [][]string{
			{"--size", fmt.Sprint(len(data))},
			{"--range", "1000-2999999"},
		} {
			a := append([]string{"download", "--endpoint", o.url, "--token", read, "--hash", line.FileHash, "-o", got}, args...)
			if out, err := exec.Command(xet, a...).CombinedOutput(); err != nil {
				t.Fatalf("xet %v: %v\n%s", a, err, out)
			}
			b, err := os.ReadFile(got)
			if err != nil {
				t.Fatal(err)
			}
			want := data
			if args[0] == "--range" {
				want = data[1000:3000000]
			}
			if !bytes.Equal(b, want) {
				t.Fatalf("xet download %v: %d bytes differ", args, len(b))
			}
		}
	})
}
