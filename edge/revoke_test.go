package edge

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// revokeDeadline bounds how long an edge may keep serving a file after the origin hid it.
const revokeDeadline = 10 * time.Second

// startOriginAdmin runs the origin like startOrigin, with its admin listener on a free loopback
// port, and returns the origin and the admin listener's base URL.
func startOriginAdmin(t *testing.T, dir string) (*origin, string) {
	t.Helper()
	admin := testenv.FreeAddr(t)
	return startOrigin(t, dir, "--admin-listen", admin), "http://" + admin
}

// TestRevoke hides a file on the origin's admin listener and checks that an edge which served
// it stops within revokeDeadline, while another file of the scope stays served.
func TestRevoke(t *testing.T) {
	const scope = "models/acme/revoke"
	o, admin := startOriginAdmin(t, t.TempDir())
	w, r := o.token(t, scope, "write"), o.token(t, scope, "read")
	f := upload(t, o, w, 11, 2, 16)
	keep := upload(t, o, w, 12, 1, 16)
	e := startEdge(t, o, t.TempDir())

	// Served (and cached) by the edge before the hide.
	for _, g := range []*fixture{f, keep} {
		got, err := download(t, e.tlsURL, r, xetclient.HTTP1, g.hash, nil)
		if err != nil || !bytes.Equal(got, g.data) {
			t.Fatalf("download of %s before the hide: %v (%d bytes, want %d)", g.hash, err, len(got), len(g.data))
		}
	}
	recon := e.tlsURL + "/v2/reconstructions/" + f.hash.String()
	if st, body := call(t, "GET", recon, r, nil); st != 200 {
		t.Fatalf("reconstruction before the hide: %d %s", st, body)
	}

	body, _ := json.Marshal(map[string]any{"scope": scope, "files": []string{f.hash.String()}})
	start := time.Now()
	st, ans := call(t, "POST", admin+"/admin/v1/hide", o.token(t, "", "admin"), body)
	if st != 200 {
		t.Fatalf("hide: %d %s", st, ans)
	}
	// The origin itself stops at once.
	if st, _ := call(t, "GET", o.url+"/v2/reconstructions/"+f.hash.String(), r, nil); st != 404 {
		t.Errorf("origin reconstruction right after the hide: %d, want 404", st)
	}

	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(revokeDeadline)
	defer deadline.Stop()
	for last := 200; last != 404; {
		select {
		case <-deadline.C:
			t.Fatalf("edge still answers %d for the hidden file %v after the hide", last, revokeDeadline)
		case <-tick.C:
		}
		last, _ = call(t, "GET", recon, r, nil)
		if last != 200 && last != 404 {
			t.Fatalf("edge reconstruction during revocation: %d", last)
		}
	}
	t.Logf("edge stopped serving the hidden file %v after the hide was posted", time.Since(start).Round(time.Millisecond))

	if _, err := download(t, e.tlsURL, r, xetclient.HTTP1, f.hash, nil); err == nil {
		t.Error("the Go client still downloads the hidden file through the edge")
	}
	got, err := download(t, e.tlsURL, r, xetclient.HTTP1, keep.hash, nil)
	if err != nil || !bytes.Equal(got, keep.data) {
		t.Errorf("the scope's other file after the hide: %v (%d bytes)", err, len(got))
	}
}
