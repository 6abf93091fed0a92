package interop

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestInteropTwoScopes: writers of two scopes upload the same files with the stock clients. The
// origin refuses a shard that references a single-chunk xorb its scope did not upload, and the
// dedup route does not offer another scope's single-chunk xorbs (docs/security.md, "What a hash
// grants"); the clients must never be led into a registration the origin then refuses. A file of
// under 8 KiB is one chunk (one single-chunk xorb); the larger file is many chunks, which the
// second scope must dedup against the first scope's xorbs. Both clients keep their local state
// (hf_xet's shard cache) between the two scopes, as one user writing to two repositories does.
func TestInteropTwoScopes(t *testing.T) {
	clients := stockClients(t)
	bins := buildBinaries(t)
	const scopeA, scopeB, scopeC = "models/acme/first", "models/other/second", "models/third/elsewhere"
	files := make(map[string][]fixture)
	for i, c := range clients {
		files[c.name] = twoScopeFixtures(t, uint64(100+i))
	}
	for _, be := range []struct {
		name  string
		setup func(t *testing.T) backend
	}{
		{"embedded", func(*testing.T) backend { return backend{} }},
		{"postgres-minio", postgresMinIO},
	} {
		t.Run(be.name, func(t *testing.T) {
			o := startOrigin(t, bins.origin, be.setup(t))
			for _, c := range clients {
				t.Run(c.name, func(t *testing.T) {
					fx := files[c.name]
					scopes := []string{scopeA, scopeB, scopeC}
					// The third scope's writer is another user: a client cache of its own.
					envs := [][]string{o.env, o.env, append(slices.Clone(o.env), "HF_XET_CACHE="+filepath.Join(t.TempDir(), "hf-xet-cache"))}
					got := make([][]uploadResult, len(scopes))
					for i, sc := range scopes {
						w := scopedAuth(o, o.token(t, sc, "write"), sc, c.viaHub)
						// One call per file: uploaded together, the clients would pack the small
						// file's chunk into the large file's xorb.
						for _, f := range fx {
							got[i] = append(got[i], c.upload(t, envs[i], w, f)...)
						}
					}
					for j, f := range fx {
						for i := range scopes {
							t.Logf("%s: client sent %d xorb bytes in %s (-1: not reported)", f.name, got[i][j].clientXorbBytes, scopes[i])
							if got[i][j].hash != got[0][j].hash {
								t.Errorf("%s: hashed to %s in %s, %s in %s", f.name, got[0][j].hash, scopeA, got[i][j].hash, scopes[i])
							}
						}
					}
					for i := 1; i < len(scopes); i++ {
						// The large file dedups against the first scope's xorbs (through the
						// dedup route or the client's own cache).
						if m := got[i][1]; m.clientXorbBytes*4 > m.size {
							t.Errorf("%s sent %d xorb bytes for the %d B file the first scope stored", scopes[i], m.clientXorbBytes, m.size)
						}
					}
					// A client that asks the dedup route is not offered the first scope's
					// single-chunk xorb: it uploads the chunk itself.
					if s := got[2][0]; s.clientXorbBytes < s.size {
						t.Errorf("%s sent %d xorb bytes for the %d B one-chunk file: it deduplicated against another scope's single-chunk xorb",
							scopeC, s.clientXorbBytes, s.size)
					}
					// Each scope reads its own registrations (whole files: ranges are the
					// business of TestInterop).
					for i, sc := range scopes {
						read := o.token(t, sc, "read")
						for _, r := range got[i] {
							t.Run(fmt.Sprintf("download/%s/%s", sc, r.name), func(t *testing.T) {
								out := filepath.Join(t.TempDir(), "whole")
								if err := c.download(t, envs[i], scopedAuth(o, read, sc, c.viaHub), r.hash, r.size, nil, out); err != nil {
									t.Fatalf("download: %v", err)
								}
								sameBytes(t, r.path, 0, r.size, out)
							})
						}
					}
				})
			}
		})
	}
}

// twoScopeFixtures: a file of one chunk (under the 8 KiB minimum chunk size) and one of many,
// random bytes of their own for each seed.
func twoScopeFixtures(t *testing.T, seed uint64) []fixture {
	t.Helper()
	rng := mrand.NewChaCha8([32]byte{byte(seed), 'p'})
	dir := t.TempDir()
	var fx []fixture
	for _, f := range []struct {
		name string
		size int64
	}{{"small", 5000}, {"multi", 3 << 20}} {
		buf := make([]byte, f.size)
		_, _ = rng.Read(buf)
		p := filepath.Join(dir, f.name+".bin")
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(buf)
		fx = append(fx, fixture{name: f.name, path: p, size: f.size, sha256: hex.EncodeToString(sum[:])})
	}
	return fx
}

// scopedAuth points an uploader at the origin for scope (through the token route when viaHub).
func scopedAuth(o *origin, tok, scope string, viaHub bool) auth {
	a := auth{endpoint: o.url, token: tok}
	if viaHub {
		a.hub, a.repo = o.url, scope
	}
	return a
}
