package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// runAdmin runs an offline admin command of the binary on o's data directory and
// configuration (and environment), returning its status and outputs.
func (o *proc) runAdmin(t *testing.T, cmd string, args ...string) (int, string, string) {
	t.Helper()
	full := append([]string{cmd, "--data-dir", o.dir}, o.args...)
	return testenv.RunStatus(t, o.bin, append(os.Environ(), o.env...), append(full, args...)...)
}

// usageOf runs `xet-origin usage [scope]` and decodes its answer.
type usageAnswer struct {
	Scopes []struct {
		Scope        string `json:"scope"`
		Files        int64  `json:"files"`
		LogicalBytes uint64 `json:"logical_bytes"`
		UniqueBytes  uint64 `json:"unique_bytes"`
		SharedBytes  uint64 `json:"shared_bytes"`
	} `json:"scopes"`
	Totals struct {
		Files        int64  `json:"files"`
		LogicalBytes uint64 `json:"logical_bytes"`
		StoredBytes  uint64 `json:"stored_bytes"`
		SharedBytes  uint64 `json:"shared_bytes"`
	} `json:"totals"`
}

func (o *proc) usage(t *testing.T, scope ...string) usageAnswer {
	t.Helper()
	code, out, errOut := o.runAdmin(t, "usage", scope...)
	if code != 0 {
		t.Fatalf("usage %v: status %d, stderr %s", scope, code, errOut)
	}
	var u usageAnswer
	if err := json.Unmarshal([]byte(out), &u); err != nil {
		t.Fatalf("usage output %q: %v", out, err)
	}
	return u
}

// xorbObjects returns the size of every xorb object in o's store, measured in the store itself
// (the local directory, or the MinIO bucket of o's configuration), by key.
func (o *proc) xorbObjects(t *testing.T) map[string]int64 {
	t.Helper()
	return o.storeObjects(t, "xorbs")
}

// storeObjects is xorbObjects for the objects under top ("xorbs", "shards", "hub").
func (o *proc) storeObjects(t *testing.T, top string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	var cfg struct {
		Objects struct{ Bucket string } `json:"objects"`
	}
	if i := slices.Index(o.args, "--config"); i >= 0 {
		b, err := os.ReadFile(o.args[i+1])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
	}
	if cfg.Objects.Bucket == "" { // local disk under the data directory
		root := filepath.Join(o.dir, "objects")
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
				return err
			}
			st, err := d.Info()
			if err != nil {
				return err
			}
			// objstore.Local keeps key "xorbs/default/H" at xorbs/default/_HH/H.
			rel, _ := filepath.Rel(root, filepath.Dir(filepath.Dir(p)))
			if strings.HasPrefix(filepath.Base(filepath.Dir(p)), "_") {
				out[filepath.ToSlash(rel)+"/"+d.Name()] = st.Size()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	s3 := testenv.RequireS3(t)
	c, err := minio.New(s3.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s3.AccessKey, s3.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for obj := range c.ListObjects(ctx, cfg.Objects.Bucket, minio.ListObjectsOptions{Prefix: top + "/", Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		out[obj.Key] = obj.Size
	}
	return out
}

// TestDeleteAndUsageCommands: `xet-origin delete` and `xet-origin usage` on the data directory
// and configuration of a running origin, on both backends. usage's unique and shared bytes
// agree with the xorb objects measured in the store; delete of a file and of a whole
// repository makes the origin answer 404 (within its 2 s visibility TTL: the command is another
// process), leaves the other repository's copy readable, and moves the shared bytes to the
// other repository; bad command lines exit 2 and change nothing; deleting what is not visible
// exits 1.
func TestDeleteAndUsageCommands(t *testing.T) {
	onEachBackend(t, func(t *testing.T, o *proc) {
		o.start(t)
		const a, b = "models/acme/cli-a", "models/acme/cli-b"
		rng := mrand.New(mrand.NewPCG(81, 82))
		shared := makeXorb(rng, 3)
		fa, fs2 := makeFile(shared, makeXorb(rng, 2)), makeFile(makeXorb(rng, 2))
		fb := makeFile(shared)
		wa := o.token(t, a, "write")
		uploadFile(t, o, wa, fa)
		uploadFile(t, o, wa, fs2)
		uploadFile(t, o, o.token(t, b, "write"), fb)
		objs := o.xorbObjects(t)
		size := func(f fileUp) (n uint64) {
			for _, x := range f.xorbs {
				sz, ok := objs["xorbs/default/"+x.hash.String()]
				if !ok {
					t.Fatalf("xorb %s not in the store", x.hash)
				}
				n += uint64(sz)
			}
			return n
		}
		sharedBytes := size(fb)
		var total uint64
		for _, n := range objs {
			total += uint64(n)
		}

		u := o.usage(t)
		if len(u.Scopes) != 2 || u.Scopes[0].Scope != a || u.Scopes[1].Scope != b {
			t.Fatalf("usage scopes %+v", u.Scopes)
		}
		ua, ub := u.Scopes[0], u.Scopes[1]
		if ua.Files != 2 || ua.LogicalBytes != uint64(len(fa.data)+len(fs2.data)) ||
			ua.UniqueBytes != size(fa)+size(fs2)-sharedBytes || ua.SharedBytes != sharedBytes {
			t.Errorf("usage of %s: %+v; want 2 files, %d logical, %d unique, %d shared", a, ua,
				len(fa.data)+len(fs2.data), size(fa)+size(fs2)-sharedBytes, sharedBytes)
		}
		if ub.Files != 1 || ub.UniqueBytes != 0 || ub.SharedBytes != sharedBytes {
			t.Errorf("usage of %s: %+v", b, ub)
		}
		if u.Totals.StoredBytes != total || u.Totals.SharedBytes != sharedBytes || u.Totals.Files != 3 {
			t.Errorf("totals %+v; store holds %d bytes of xorbs", u.Totals, total)
		}

		for _, bad := range [][]string{
			{"--scope", a}, // neither files nor --all
			{"--scope", a, "--all", fa.hash.String()}, // both
			{"--scope", "", "--all"},                  // empty scope
			{"--scope", a, "nothex"},                  // bad hash
			{"--scope", a, "--all", "--bogus"},        // unknown flag
		} {
			if code, _, errOut := o.runAdmin(t, "delete", bad...); code != 2 || !strings.Contains(errOut, "configuration error") {
				t.Errorf("delete %q: status %d, stderr %q; want 2", bad, code, errOut)
			}
		}
		if code, _, errOut := o.runAdmin(t, "delete", "--scope", "models/acme/none", "--all"); code != 1 || !strings.Contains(errOut, "nothing visible") {
			t.Errorf("delete of an empty scope: status %d, stderr %q; want 1, nothing visible", code, errOut)
		}
		if code, _, errOut := o.runAdmin(t, "usage", a, b); code != 2 {
			t.Errorf("usage with two scopes: status %d, %q", code, errOut)
		}
		if got := o.usage(t); got.Totals != u.Totals {
			t.Fatalf("refused commands changed the usage: %+v", got.Totals)
		}

		ra := o.token(t, a, "read")
		gone := func(f fileUp) error {
			return eventually(5*time.Second, func() error {
				if st, _ := call(t, "GET", o.base()+"/v2/reconstructions/"+f.hash.String(), ra, nil); st != http.StatusNotFound {
					return fmt.Errorf("reconstruction of %s: %d, want 404", f.hash, st)
				}
				return nil
			})
		}
		code, out, errOut := o.runAdmin(t, "delete", "--scope", a, fa.hash.String())
		if code != 0 || !strings.Contains(out, `"deleted":1`) {
			t.Fatalf("delete of a file: status %d, stdout %q, stderr %q", code, out, errOut)
		}
		if err := gone(fa); err != nil {
			t.Fatal(err)
		}
		if st, _ := call(t, "GET", o.base()+"/v2/reconstructions/"+fs2.hash.String(), ra, nil); st != http.StatusOK {
			t.Errorf("the repository's other file: %d", st)
		}
		if code, out, _ := o.runAdmin(t, "delete", "--scope", a, "--all"); code != 0 || !strings.Contains(out, `"all":true`) {
			t.Fatalf("delete of the repository: %d %q", code, out)
		}
		if err := gone(fs2); err != nil {
			t.Fatal(err)
		}
		checkDownload(t, o.client(t, o.token(t, b, "read")), fb.hash, fb.data)

		u = o.usage(t, b)
		if len(u.Scopes) != 1 || u.Scopes[0].UniqueBytes != sharedBytes || u.Scopes[0].SharedBytes != 0 ||
			u.Totals.StoredBytes != sharedBytes || u.Totals.Files != 1 {
			t.Errorf("usage after the deletes: %+v", u)
		}
		if u := o.usage(t, a); len(u.Scopes) != 1 || u.Scopes[0].Files != 0 || u.Scopes[0].LogicalBytes != 0 {
			t.Errorf("usage of the deleted repository: %+v", u.Scopes)
		}
	})
}
