package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// TestDownloadFailover (issue 12 item 3): the real origin and two real edges that register with
// it; a Go client that takes its CAS from the origin's token route downloads a file through the
// edge it is given, and that edge is killed (SIGKILL) when a third of the file has arrived. The
// client asks the token route again, is sent to the other edge, and finishes byte-exact with no
// error, without starting over (it fetches well under twice the file).
func TestDownloadFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the origin and two edges")
	}
	originBin := testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin")
	edgeBin := testenv.Build(t, ".")
	dir, addr := t.TempDir(), testenv.FreeAddr(t)
	origin := "http://" + addr
	testenv.Start(t, originBin, []string{"--data-dir", dir, "--listen", addr},
		testenv.Options{Ready: `"msg":"xet-origin serving"`})
	tok := func(scope, access string) string {
		return testenv.Run(t, originBin, "token", "--data-dir", dir, "--scope", scope, "--access", access)
	}
	const scope = "models/acme/failover"
	edgeTok := tok("edge", "edge")
	type edgeProc struct {
		url string
		p   *testenv.Process
	}
	var edges []edgeProc
	for range 2 {
		tlsAddr, httpAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
		e := edgeProc{url: "http://" + httpAddr}
		e.p = testenv.Start(t, edgeBin, []string{"--origin", origin, "--origin-token", edgeTok, "--data-dir", t.TempDir(),
			"--listen", tlsAddr, "--http-listen", httpAddr, "--public-url", e.url},
			testenv.Options{Ready: `"msg":"xet-edge serving"`})
		edges = append(edges, e)
	}

	// A 48 MiB file of random bytes: a few xorbs, many transfer ranges.
	data := make([]byte, 48<<20)
	rand.Read(data)
	up, err := xetclient.New(xetclient.Options{Endpoint: origin, Token: tok(scope, "write")})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	res, err := up.UploadFiles(t.Context(), []xetclient.UploadFile{{Path: "f", Reader: bytes.NewReader(data)}}, xetclient.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}

	tokenURL := origin + "/api/" + scope + "/xet-read-token/main"
	read := tok(scope, "read")
	// Wait until both edges are handed out for some repository: the registry has them.
	var first string
	if err := eventually(10*time.Second, func() error {
		first = tokenFrom(t, origin, read, scope, "127.0.0.1")
		if first != edges[0].url && first != edges[1].url {
			return errNotYet
		}
		return nil
	}); err != nil {
		t.Fatalf("token route does not name an edge: %s", first)
	}
	victim := edges[0]
	if first == edges[1].url {
		victim = edges[1]
	}

	c, err := xetclient.New(xetclient.Options{TokenURL: tokenURL,
		TokenHeader: http.Header{"Authorization": {"Bearer " + read}}, Concurrency: 2, BlockSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var once sync.Once
	var killedAt time.Time
	var stats xetclient.DownloadStats
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	n, err := c.Download(ctx, res[0].FileHash, &out, xetclient.DownloadOptions{Size: int64(len(data)), Stats: &stats,
		Progress: func(done, total int64) {
			if done >= int64(len(data))/3 {
				once.Do(func() { victim.p.Kill(); killedAt = time.Now() })
			}
		}})
	if err != nil {
		t.Fatalf("download with the edge killed at a third: %v", err)
	}
	if killedAt.IsZero() {
		t.Fatal("the edge was never killed")
	}
	if n != int64(len(data)) || !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("downloaded %d bytes, not byte-exact", n)
	}
	t.Logf("download %v in all, %v after the kill; %d transfer bytes for a %d-byte file; %d token route renewals",
		time.Since(start).Round(10*time.Millisecond), time.Since(killedAt).Round(10*time.Millisecond),
		stats.TransferBytes, len(data), c.Failovers())
	if c.Failovers() < 1 {
		t.Error("the client never asked the token route again")
	}
	if stats.TransferBytes >= int64(len(data))*3/2 {
		t.Errorf("%d transfer bytes for %d: the download started over", stats.TransferBytes, len(data))
	}
}

// TestSeveralOrigins (issue 12 item 4, edges side): two real origin processes serve one data
// directory (one SQLite index, one object directory, one key set — replicas of one origin); an
// edge is given both URLs. With the first origin killed, the edge still fills its caches (a
// download of a file it never saw, its record, layouts and xorb bytes all misses) and proxies
// an upload, through the second.
func TestSeveralOrigins(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two origins and an edge")
	}
	originBin := testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin")
	edgeBin := testenv.Build(t, ".")
	dir := t.TempDir()
	var procs []*testenv.Process
	var urls []string
	for range 2 {
		addr := testenv.FreeAddr(t)
		procs = append(procs, testenv.Start(t, originBin, []string{"--data-dir", dir, "--listen", addr},
			testenv.Options{Ready: `"msg":"xet-origin serving"`}))
		urls = append(urls, "http://"+addr)
	}
	tok := func(scope, access string) string {
		return testenv.Run(t, originBin, "token", "--data-dir", dir, "--scope", scope, "--access", access)
	}
	const scope = "models/acme/replicas"
	httpAddr := testenv.FreeAddr(t)
	edgeURL := "http://" + httpAddr
	testenv.Start(t, edgeBin, []string{"--origin", urls[0] + "," + urls[1], "--origin-token", tok("edge", "edge"),
		"--data-dir", t.TempDir(), "--listen", testenv.FreeAddr(t), "--http-listen", httpAddr, "--public-url", edgeURL},
		testenv.Options{Ready: `"msg":"xet-edge serving"`})

	data := make([]byte, 6<<20)
	rand.Read(data)
	up, err := xetclient.New(xetclient.Options{Endpoint: urls[0], Token: tok(scope, "write")})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	res, err := up.UploadFiles(t.Context(), []xetclient.UploadFile{{Path: "f", Reader: bytes.NewReader(data)}}, xetclient.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	procs[0].Kill()

	c, err := xetclient.New(xetclient.Options{Endpoint: edgeURL, Token: tok(scope, "read"), Retry: xetclient.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out bytes.Buffer
	if _, err := c.Download(t.Context(), res[0].FileHash, &out, xetclient.DownloadOptions{}); err != nil {
		t.Fatalf("download through the edge with the first origin dead: %v", err)
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Fatal("download not byte-exact")
	}
	// An upload sent to the edge is proxied, to the origin that answers.
	w, err := xetclient.New(xetclient.Options{Endpoint: edgeURL, Token: tok(scope, "write"), Retry: xetclient.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	more := make([]byte, 1<<20)
	rand.Read(more)
	if _, err := w.UploadFiles(t.Context(), []xetclient.UploadFile{{Path: "g", Reader: bytes.NewReader(more)}}, xetclient.UploadOptions{}); err != nil {
		t.Fatalf("upload through the edge with the first origin dead: %v", err)
	}
}
