package hub

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

func xetHashN(n int) hash.Hash {
	var h hash.Hash
	h[0], h[1], h[31] = byte(n>>8), byte(n), 0x5a
	return h
}

func rootSet(t *testing.T, r *Roots) map[hash.Hash]int {
	t.Helper()
	out := map[hash.Hash]int{}
	if err := r.Files(t.Context(), func(f hash.Hash) error { out[f]++; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRoots, on each store: every Xet file of every commit of every repository is a root (more
// commits than one page, history included, not only heads), regular blobs are not; uploads
// recorded in hub_lfs are roots within the window only; a deleted repository roots nothing; an
// error of the callback stops the walk.
func TestRoots(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			now := time.Unix(1_800_000_000, 0)
			a := Repo{Type: Model, ID: "acme/a", Created: now}
			b := Repo{Type: Dataset, ID: "acme/b", Created: now}
			for _, r := range []Repo{a, b} {
				if err := s.CreateRepo(ctx, r, newCommit(&Commit{Message: "initial", Tree: []Entry{}})); err != nil {
					t.Fatal(err)
				}
			}
			const n = rootsPage + 5
			head, err := s.Ref(ctx, a.Scope(), "branch", "main")
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				c := newCommit(&Commit{Parent: head, Message: fmt.Sprint(i), Tree: []Entry{
					{Path: "model.bin", Size: 10, SHA256: fmt.Sprintf("%064x", i), Xet: xetHashN(i).String()},
					{Path: "config.json", Size: 2, SHA256: fmt.Sprintf("%064x", i+1<<20), OID: "x"},
				}})
				if err := s.PutCommit(ctx, a.Scope(), "main", c); err != nil {
					t.Fatal(err)
				}
				head = c.ID
			}
			inB := xetHashN(9999)
			bHead, _ := s.Ref(ctx, b.Scope(), "branch", "main")
			if err := s.PutCommit(ctx, b.Scope(), "main", newCommit(&Commit{Parent: bHead, Tree: []Entry{{Path: "d", Xet: inB.String()}}})); err != nil {
				t.Fatal(err)
			}
			oldUp, newUp := xetHashN(7001), xetHashN(7002)
			if err := s.PutLFS(ctx, a.Scope(), []LFSFile{{SHA256: "01", File: oldUp.String(), Size: 1}}, now.Add(-2*time.Hour)); err != nil {
				t.Fatal(err)
			}
			if err := s.PutLFS(ctx, a.Scope(), []LFSFile{{SHA256: "02", File: newUp.String(), Size: 1}}, now.Add(-time.Minute)); err != nil {
				t.Fatal(err)
			}
			r := &Roots{Store: s, LFSWindow: time.Hour, Now: func() time.Time { return now }}
			got := rootSet(t, r)
			for i := range n {
				if got[xetHashN(i)] != 1 {
					t.Fatalf("file of commit %d: rooted %d times, want 1", i, got[xetHashN(i)])
				}
			}
			if got[inB] != 1 || got[newUp] != 1 || got[oldUp] != 0 || len(got) != n+2 {
				t.Fatalf("roots: %d files (b's %d, recent upload %d, old upload %d); want %d", len(got), got[inB], got[newUp], got[oldUp], n+2)
			}
			// A registration again refreshes the upload's time.
			if err := s.PutLFS(ctx, a.Scope(), []LFSFile{{SHA256: "01", File: oldUp.String(), Size: 1}}, now); err != nil {
				t.Fatal(err)
			}
			if got := rootSet(t, r); got[oldUp] != 1 {
				t.Fatalf("re-registered upload rooted %d times, want 1", got[oldUp])
			}
			if got := rootSet(t, &Roots{Store: s}); got[newUp] != 0 || len(got) != n+1 {
				t.Fatalf("without a window: %d roots, want the %d committed files", len(got), n+1)
			}
			if err := s.DeleteRepo(ctx, b.Scope()); err != nil {
				t.Fatal(err)
			}
			if got := rootSet(t, r); got[inB] != 0 || len(got) != n+2 {
				t.Fatalf("after deleting b: b's file rooted %d times, %d roots", got[inB], len(got))
			}
			stop := errors.New("stop")
			calls := 0
			if err := r.Files(ctx, func(hash.Hash) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
				t.Fatalf("callback error: %v after %d calls", err, calls)
			}
		})
	}
}

// TestLFSAtMigration: a database whose hub_lfs predates the at column gets it on open; its
// rows count as old uploads (no root), and new registrations work.
func TestLFSAtMigration(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "index.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE hub_lfs (scope TEXT NOT NULL, sha256 TEXT NOT NULL, file TEXT NOT NULL, size BIGINT NOT NULL, PRIMARY KEY (scope, sha256));
INSERT INTO hub_lfs VALUES ('models/a/b', '01', '`+xetHashN(1).String()+`', 1)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for range 2 { // and a second open finds the column there
		s, err := Open(ctx, "sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.PutLFS(ctx, "models/a/b", []LFSFile{{SHA256: "02", File: xetHashN(2).String(), Size: 1}}, time.Now()); err != nil {
			t.Fatal(err)
		}
		got := rootSet(t, &Roots{Store: s, LFSWindow: time.Hour})
		s.Close()
		if len(got) != 1 || got[xetHashN(2)] != 1 {
			t.Fatalf("roots after the migration: %v; want only the new upload", got)
		}
	}
}
