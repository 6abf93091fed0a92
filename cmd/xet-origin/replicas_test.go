package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/internal/xfertest"
)

// writeSecret writes a shared secret file (docs/origin.md, "Origin replicas") and returns its
// path.
func writeSecret(t *testing.T, secret string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// secretToken mints a token with the key derived from the secret in file (no data dir).
func secretToken(t *testing.T, bin, file, scope, access string) string {
	t.Helper()
	tok := testenv.Run(t, bin, "token", "--secret-file", file, "--scope", scope, "--access", access)
	if strings.Count(tok, ".") != 2 || strings.ContainsAny(tok, " \n") {
		t.Fatalf("token output %q is not just a JWT", tok)
	}
	return tok
}

// replica is a second origin on a's database and bucket, with its own data dir and address.
func replica(t *testing.T, a *proc) *proc {
	return &proc{bin: a.bin, dir: t.TempDir(), addr: testenv.FreeAddr(t),
		args: append([]string(nil), a.args...), env: append([]string(nil), a.env...)}
}

// TestReplicasShareKeysAndState runs two xet-origin processes with different data directories
// on one PostgreSQL database and one MinIO bucket, given the same shared secret: a token minted
// from the secret is accepted by both; a file uploaded through A downloads through B; a transfer
// URL signed by A is served by B; a hide made through B is a 404 through A within the visibility
// TTL (index.DefaultVisibilityTTL, 2 s) and is on A's event stream (what edges subscribed to A
// read), and so is a garbage collection's sweep of its xorb made by another process; an edge reporting to A is handed out by B's token route; a replica rotating to a new secret with the old one as previous accepts tokens of
// both, while A, on the old secret only, refuses the new one's.
func TestReplicasShareKeysAndState(t *testing.T) {
	bin := buildBinary(t)
	pg, s3 := services(t)
	secret := writeSecret(t, "replica-secret-"+strings.Repeat("x", 32))
	a := newOrigin(t, bin)
	production(t, a, pg, s3)
	a.args = append(a.args, "--secret-file", secret)
	b := replica(t, a)
	adminB := testenv.FreeAddr(t)
	b.args = append(b.args, "--admin-listen", adminB)
	a.start(t)
	b.start(t)

	const scope = "models/acme/replicas"
	w := secretToken(t, bin, secret, scope, "write")
	r := secretToken(t, bin, secret, scope, "read")
	rng := mrand.New(mrand.NewPCG(12, 4))
	f := makeFile(makeXorb(rng, 200))
	uploadFile(t, a, w, f)
	checkDownload(t, b.client(t, r), f.hash, f.data)

	// A transfer URL A signed, sent to B (same path and query, B's address).
	fa := fetches(t, a, r, f.hash)[0]
	fb := fa
	fb.URL = strings.Replace(fa.URL, a.base(), b.base(), 1)
	if fb.URL == fa.URL {
		t.Fatalf("transfer URL %s does not start with A's public URL %s", fa.URL, a.base())
	}
	expectFetch(t, fb, http.StatusPartialContent)

	// Hide through B: A answers 404 within the visibility TTL; A's event stream has the hide.
	body, _ := json.Marshal(map[string]any{"scope": scope, "files": []string{f.hash.String()}})
	if st, out := call(t, "POST", "http://"+adminB+"/admin/v1/hide", secretToken(t, bin, secret, "", "admin"), body); st != http.StatusOK {
		t.Fatalf("hide through B: %d %s", st, out)
	}
	start := time.Now()
	if err := eventually(5*time.Second, func() error {
		ans, err := do("GET", a.base()+"/v2/reconstructions/"+f.hash.String(), r, nil)
		return statusIs(ans, err, http.StatusNotFound)
	}); err != nil {
		t.Fatalf("reconstruction through A after the hide through B: %v", err)
	}
	t.Logf("hide through B took effect through A after %v", time.Since(start).Round(time.Millisecond))
	expectFetch(t, xfertest.Fetch{URL: fa.URL, Start: fa.Start, End: fa.End}, http.StatusForbidden)
	st, evs := call(t, "GET", a.base()+"/internal/v1/events?after=0&wait=0", secretToken(t, bin, secret, "edge", "edge"), nil)
	if st != http.StatusOK || !bytes.Contains(evs, []byte(f.hash.String())) {
		t.Fatalf("A's event stream after the hide through B: %d %s", st, evs)
	}

	// A garbage collection run by another process (the `gc` command, with B's configuration)
	// sweeps the hidden file's xorb: its event is on A's stream too (edges evict on it).
	cfgFile := ""
	for i, arg := range b.args {
		if arg == "--config" && i+1 < len(b.args) {
			cfgFile = b.args[i+1]
		}
	}
	gcEnv := append(append([]string(nil), os.Environ()...), b.env...)
	xorbHash := f.xorbs[0].hash.String()
	if err := eventually(20*time.Second, func() error {
		code, out, errOut := testenv.RunStatus(t, bin, gcEnv, "gc", "--data-dir", b.dir, "--config", cfgFile, "--grace", "1s", "--force")
		if code != 0 {
			return fmt.Errorf("gc: status %d: %s", code, errOut)
		}
		var rep struct {
			Swept int64 `json:"swept"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			return fmt.Errorf("gc report %q: %v", out, err)
		}
		if rep.Swept > 0 {
			return nil
		}
		time.Sleep(time.Second) // the grace the condemned xorb must outlive
		return fmt.Errorf("gc swept nothing yet: %s", out)
	}); err != nil {
		t.Fatal(err)
	}
	if st, evs := call(t, "GET", a.base()+"/internal/v1/events?after=0&wait=0", secretToken(t, bin, secret, "edge", "edge"), nil); st != http.StatusOK || !bytes.Contains(evs, []byte(xorbHash)) {
		t.Fatalf("A's event stream after a GC sweep of xorb %s: %d %s", xorbHash, st, evs)
	}

	// The edge registry is in the database: an edge that reports to A is what B's token route
	// hands out (within the registry view's refresh, about a second).
	edgeURL := "https://edge-eu-1.example.com"
	report, _ := json.Marshal(map[string]any{"url": edgeURL, "region": "default", "version": "test",
		"permits": 8, "free_permits": 8, "cache_fill": 0.1, "hit_ratio": 0.5, "ready": true})
	if st, out := call(t, "POST", a.base()+"/internal/v1/edges", secretToken(t, bin, secret, "edge", "edge"), report); st/100 != 2 {
		t.Fatalf("edge report to A: %d %s", st, out)
	}
	if err := eventually(5*time.Second, func() error {
		ans, err := do("GET", b.base()+"/api/"+scope+"/xet-read-token/main", r, nil)
		if err != nil {
			return err
		}
		if !bytes.Contains(ans.body, []byte(`"casUrl":"`+edgeURL+`"`)) {
			return fmt.Errorf("B's read token: %d %s, want casUrl %s", ans.status, ans.body, edgeURL)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Rotation: C has a new secret and the old one as previous.
	secret2 := writeSecret(t, "rotated-secret-"+strings.Repeat("y", 32))
	c := replica(t, a)
	for i, arg := range c.args {
		if arg == secret {
			c.args[i] = secret2
		}
	}
	c.args = append(c.args, "--previous-secret-file", secret)
	c.start(t)
	g := makeFile(makeXorb(rng, 20))
	uploadFile(t, c, w, g) // the old secret's token
	w2 := secretToken(t, bin, secret2, scope, "write")
	h := makeFile(makeXorb(rng, 20))
	uploadFile(t, c, w2, h) // the new one's
	if st, out := call(t, "POST", a.base()+"/v1/shards", w2, h.shard); st != http.StatusUnauthorized {
		t.Fatalf("A (old secret only) answered %d %s to the new secret's token, want 401", st, out)
	}
}

// TestSecretBadInput: a shared secret that is too short, unreadable, or given twice stops the
// origin before it serves, with exit status 2 and a message naming the problem; nothing is
// created in the data directory.
func TestSecretBadInput(t *testing.T) {
	bin := buildBinary(t)
	short := writeSecret(t, "too-short")
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"short file", nil, []string{"--secret-file", short}, "auth.secret_file " + short + " holds 9 bytes, want at least 32"},
		{"missing file", nil, []string{"--secret-file", "/nonexistent/secret"}, "auth.secret_file: open /nonexistent/secret: no such file or directory"},
		{"short env", []string{"XETCDN_SECRET=abc"}, nil, "XETCDN_SECRET holds 3 bytes, want at least 32"},
		{"both", []string{"XETCDN_SECRET=" + strings.Repeat("z", 40)}, []string{"--secret-file", short}, "auth.secret_file and XETCDN_SECRET are both set"},
		{"previous alone", []string{"XETCDN_PREVIOUS_SECRET=" + strings.Repeat("z", 40)}, nil, "a previous secret needs a current one"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			env := append(append([]string(nil), os.Environ()...), c.env...)
			args := append([]string{"--data-dir", dir, "--listen", testenv.FreeAddr(t)}, c.args...)
			code, _, stderr := testenv.RunStatus(t, bin, env, args...)
			if code != 2 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, c.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Fatalf("data dir holds %v after a refused start", ents)
			}
			code, _, stderr = testenv.RunStatus(t, bin, env, append([]string{"token", "--scope", "s", "--access", "read"}, c.args...)...)
			if c.name != "previous alone" && (code == 0 || !strings.Contains(stderr, strings.SplitN(c.want, " holds", 2)[0])) {
				t.Fatalf("token: exit %d, stderr %q; want an error naming %q", code, stderr, c.want)
			}
		})
	}
}
