package hub

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

func TestCheckPath(t *testing.T) {
	good := []string{"a", "config.json", "sub/dir/f.bin", "ünïcode/ö.txt", ".gitattributes", "a..b", "...x"}
	bad := []string{"", "/abs", "a/../b", "..", ".", "a/./b", "a//b", "a/", "a\x00b", "a\nb", `a\b`, ".git/config",
		"x/.git/y", strings.Repeat("a", MaxPathLen+1), "\xff\xfe"}
	for _, p := range good {
		if err := CheckPath(p); err != nil {
			t.Errorf("CheckPath(%q) = %v", p, err)
		}
	}
	for _, p := range bad {
		if err := CheckPath(p); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckPath(%q) = %v, want ErrInvalid", p, err)
		}
	}
}

func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"a/b", "../x", "/x", "a\x00", "a/./b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if CheckPath(p) != nil {
			return
		}
		if strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || filepath.Clean(p) != p ||
			strings.HasPrefix(p, "../") || p == ".." || strings.Contains(p, "/../") {
			t.Fatalf("CheckPath accepted %q", p)
		}
	})
}

func TestCheckRepoID(t *testing.T) {
	for _, id := range []string{"acme/llama", "a/b", "Org-1/model_v2.5"} {
		if err := CheckRepoID(id); err != nil {
			t.Errorf("CheckRepoID(%q) = %v", id, err)
		}
	}
	for _, id := range []string{"", "llama", "a/b/c", "../x", "a/..", "a/.b", "a/b.git", "a/b--c", "a/-b", "a b/c",
		"a/" + strings.Repeat("x", 97), "a/b\x00", "a/b-"} {
		if err := CheckRepoID(id); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckRepoID(%q) = %v, want ErrInvalid", id, err)
		}
	}
}

func TestGrants(t *testing.T) {
	p := &Principal{Grants: []Grant{{Pattern: "models/acme/*", Write: true}, {Pattern: "datasets/acme/corpus"}}}
	for _, c := range []struct {
		scope string
		write bool
		ok    bool
	}{
		{"models/acme/llama", true, true}, {"models/acme/llama", false, true}, {"models/other/llama", false, false},
		{"datasets/acme/corpus", false, true}, {"datasets/acme/corpus", true, false}, {"datasets/acme/other", false, false},
		{"models/acme/a/b", false, false},
	} {
		if got := p.Can(c.scope, c.write); got != c.ok {
			t.Errorf("Can(%q, write=%v) = %v", c.scope, c.write, got)
		}
	}
	for _, s := range []string{"models/acme/*", "models/acme/x:read:write"} {
		if _, err := ParseGrant(s); err == nil {
			t.Errorf("ParseGrant(%q) accepted", s)
		}
	}
	tok, h, err := NewToken()
	if err != nil || !strings.HasPrefix(tok, TokenPrefix) || TokenHash(tok) != h || strings.Contains(h, tok[3:]) {
		t.Fatalf("NewToken = %q, %q, %v", tok, h, err)
	}
}

// stores opens a fresh Store on each backend available: SQLite always, Postgres with the test
// services (a database of its own, dropped at the end).
func stores(t *testing.T) map[string]*Store {
	t.Helper()
	ctx := t.Context()
	out := map[string]*Store{}
	s, err := Open(ctx, "sqlite", filepath.Join(t.TempDir(), "index.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	out["sqlite"] = s
	dsn := os.Getenv(testenv.PostgresDSN)
	if dsn == "" {
		if testenv.InCI() {
			t.Fatalf("%s is not set: CI must provide Postgres", testenv.PostgresDSN)
		}
		t.Logf("%s is not set: the Postgres store is not tested", testenv.PostgresDSN)
		return out
	}
	var rb [6]byte
	rand.Read(rb[:])
	db := "hubtest_" + hex.EncodeToString(rb[:])
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)
	u, _ := url.Parse(dsn)
	u.Path = "/" + db
	p, err := Open(ctx, "postgres", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, dsn); err == nil {
			c.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	out["postgres"] = p
	return out
}

// memObjects is a hand-written in-memory object store that counts writes.
type memObjects struct {
	mu   sync.Mutex
	m    map[string][]byte
	puts int
}

func (o *memObjects) Put(_ context.Context, key string, r io.Reader, size int64) error {
	b, err := io.ReadAll(r)
	if err != nil || int64(len(b)) != size {
		return fmt.Errorf("put %s: %v (%d of %d bytes)", key, err, len(b), size)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string][]byte{}
	}
	o.m[key] = b
	o.puts++
	return nil
}

func (o *memObjects) Get(_ context.Context, key string) (io.ReadCloser, int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, ok := o.m[key]
	if !ok {
		return nil, 0, ErrEntryNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
}

func (o *memObjects) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, size, err := o.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if off < 0 || n < 0 || off+n > size {
		return nil, fmt.Errorf("range %d+%d of %d", off, n, size)
	}
	b, _ := io.ReadAll(rc)
	return io.NopCloser(bytes.NewReader(b[off : off+n])), nil
}

func (o *memObjects) Stat(_ context.Context, key string) (int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, ok := o.m[key]
	if !ok {
		return 0, ErrEntryNotFound
	}
	return int64(len(b)), nil
}

var alice = &Principal{User: "alice", Grants: []Grant{{Pattern: "models/alice/*", Write: true}}}

func commitBody(lines ...string) io.Reader {
	return strings.NewReader(strings.Join(lines, "\n") + "\n")
}

const hdr = `{"key":"header","value":{"summary":"s"}}`

func TestStoreAndCommits(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			objs := &memObjects{}
			h := New(Options{Store: st, Objects: objs, PublicURL: "http://o"})
			if _, err := h.CreateRepo(ctx, alice, Model, "alice/m", false); err != nil {
				t.Fatal(err)
			}
			if _, err := h.CreateRepo(ctx, alice, Model, "alice/m", false); !errors.Is(err, ErrExists) {
				t.Fatalf("second create: %v", err)
			}
			if _, err := h.CreateRepo(ctx, alice, Model, "bob/m", false); !errors.Is(err, ErrForbidden) {
				t.Fatalf("create outside the grants: %v", err)
			}
			first, err := h.resolve(ctx, Repo{Type: Model, ID: "alice/m"}, "main")
			if err != nil {
				t.Fatal(err)
			}
			res, err := h.Commit(ctx, alice, Model, "alice/m", "main", commitBody(hdr,
				`{"key":"file","value":{"path":"a.txt","content":"aGk=","encoding":"base64"}}`))
			if err != nil {
				t.Fatal(err)
			}
			if res.Commit.Parent != first.ID || len(res.Commit.Tree) != 1 || res.Commit.Tree[0].OID != GitBlobID([]byte("hi")) {
				t.Fatalf("commit %+v", res.Commit)
			}
			// Rejected commits store nothing and leave the branch where it was.
			putsBefore := objs.puts
			for _, body := range []io.Reader{
				commitBody(hdr, `{"key":"file","value":{"path":"ok.txt","content":"aGk=","encoding":"base64"}}`,
					`{"key":"file","value":{"path":"../x","content":"aGk=","encoding":"base64"}}`),
				commitBody(`{"key":"header","value":{"summary":"s","parentCommit":"`+first.ID+`"}}`,
					`{"key":"file","value":{"path":"b.txt","content":"aGk=","encoding":"base64"}}`),
				commitBody(hdr, `{"key":"file","value":{"path":"c.txt","content":"aGk=","encoding":"base64"}}`,
					`{"key":"lfsFile","value":{"path":"w","algo":"sha256","oid":"`+strings.Repeat("0", 64)+`"}}`),
				commitBody(hdr, `{"key":"file","value":{"path":"a.txt/b","content":"aGk=","encoding":"base64"}}`),
				strings.NewReader("not json"),
			} {
				if _, err := h.Commit(ctx, alice, Model, "alice/m", "main", body); err == nil {
					t.Fatal("a bad commit was accepted")
				}
			}
			if objs.puts != putsBefore {
				t.Fatalf("rejected commits wrote %d objects", objs.puts-putsBefore)
			}
			if head, _ := st.Ref(ctx, "models/alice/m", "branch", "main"); head != res.Commit.ID {
				t.Fatalf("main moved to %s after rejected commits", head)
			}
			// Stale parent: 412.
			_, err = h.Commit(ctx, alice, Model, "alice/m", "main", commitBody(
				`{"key":"header","value":{"summary":"s","parentCommit":"`+first.ID+`"}}`))
			if !errors.Is(err, ErrConflict) {
				t.Fatalf("stale parent: %v", err)
			}
			// Concurrent commits on one head: exactly one wins, the other gets ErrConflict.
			head := res.Commit.ID
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := newCommit(&Commit{Parent: head, Message: fmt.Sprint(i), At: int64(i), Tree: []Entry{}})
					errs[i] = st.PutCommit(ctx, "models/alice/m", "main", c)
				}()
			}
			wg.Wait()
			wins := 0
			for _, err := range errs {
				switch {
				case err == nil:
					wins++
				case !errors.Is(err, ErrConflict):
					t.Fatalf("concurrent commit: %v", err)
				}
			}
			if wins != 1 {
				t.Fatalf("%d concurrent commits on one parent succeeded, want 1", wins)
			}
			// Private repositories are invisible to others, read tokens cannot commit.
			if _, err := h.CreateRepo(ctx, alice, Model, "alice/p", true); err != nil {
				t.Fatal(err)
			}
			for _, p := range []*Principal{{}, {User: "bob", Grants: []Grant{{Pattern: "models/bob/*", Write: true}}}} {
				if _, err := h.visibleRepo(ctx, p, Model, "alice/p"); !errors.Is(err, ErrRepoNotFound) {
					t.Fatalf("private repo seen by %+v: %v", p, err)
				}
			}
			reader := &Principal{User: "alice", Grants: []Grant{{Pattern: "models/alice/*"}}}
			if _, err := h.Commit(ctx, reader, Model, "alice/p", "main", commitBody(hdr)); !errors.Is(err, ErrForbidden) {
				t.Fatalf("read-only commit: %v", err)
			}
			if err := h.DeleteRepo(ctx, alice, Model, "alice/p"); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Repo(ctx, Model, "alice/p"); !errors.Is(err, ErrRepoNotFound) {
				t.Fatalf("deleted repo: %v", err)
			}
		})
	}
}

func TestWriteErrorShape(t *testing.T) {
	h := New(Options{})
	for _, c := range []struct {
		err  error
		code int
		x    string
	}{
		{ErrRepoNotFound, 404, "RepoNotFound"}, {fmt.Errorf("%w: x", ErrRevisionNotFound), 404, "RevisionNotFound"},
		{fmt.Errorf("%w: x", ErrEntryNotFound), 404, "EntryNotFound"}, {ErrConflict, 412, ""}, {ErrInvalid, 400, ""},
		{ErrTooLarge, 413, ""}, {ErrForbidden, 403, ""}, {ErrUnauthorized, 401, ""}, {ErrUnavailable, 503, ""},
	} {
		w := httptest.NewRecorder()
		h.writeError(w, httptest.NewRequest("GET", "/api/x", nil), c.err)
		if w.Code != c.code || w.Header().Get("X-Error-Code") != c.x || !strings.HasPrefix(w.Body.String(), `{"error":`) {
			t.Errorf("%v: %d %q %s", c.err, w.Code, w.Header().Get("X-Error-Code"), w.Body)
		}
	}
}
