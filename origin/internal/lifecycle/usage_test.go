package lifecycle_test

import (
	"path/filepath"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/sqlite"
	"github.com/xetcdn/xetcdn/origin/internal/lifecycle"
	"github.com/xetcdn/xetcdn/shared/recon"
)

// TestUsageScopesInterleaved: VisibleFiles walks the rows in (file, scope) order, so one scope's
// rows come between other scopes' (here over several pages); each scope is still counted once,
// with all its files, and the scopes come out sorted.
func TestUsageScopesInterleaved(t *testing.T) {
	ctx := t.Context()
	ix, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(t.TempDir(), "index.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	g := indextest.NewGen(9)
	// xa only in models/a, xb only in models/b, xs in models/a and models/c.
	sizes := map[string]uint64{"xa": 100, "xb": 200, "xs": 400}
	xs := map[string]*recon.Term{}
	for _, name := range []string{"xa", "xb", "xs"} {
		l := g.Layout(1)
		if _, err := ix.PutXorb(ctx, l, sizes[name]); err != nil {
			t.Fatal(err)
		}
		xs[name] = &recon.Term{Xorb: l.Hash, End: 1, RawBytes: 10, ByteEnd: 8}
	}
	const n = 1200 // files a scope: more than one page (index.MaxVisiblePage) of rows
	register := func(scope, xorb string, shared *index.Registration) *index.Registration {
		r := &index.Registration{Shard: g.Hash(), Scope: scope}
		if shared != nil {
			r.Files = shared.Files
		} else {
			for range n {
				r.Files = append(r.Files, &recon.FileRecord{Hash: g.Hash(), Size: 10, Terms: []recon.Term{*xs[xorb]}})
			}
		}
		if _, err := ix.RegisterShard(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	s := register("models/c", "xs", nil)
	register("models/a", "xs", s)
	register("models/b", "xb", nil)
	register("models/a", "xa", nil)

	// The walk does interleave the scopes.
	var switches int
	var after index.VisibleKey
	last := ""
	for {
		p, err := ix.VisibleFiles(ctx, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(p) == 0 {
			break
		}
		for _, v := range p {
			if v.Scope != last {
				switches++
				last = v.Scope
			}
		}
		after = p[len(p)-1].VisibleKey
	}
	if switches < 10 {
		t.Fatalf("the walk changes scope %d times; the test wants them interleaved", switches)
	}

	u, err := lifecycle.Compute(ctx, ix)
	if err != nil {
		t.Fatal(err)
	}
	want := []lifecycle.ScopeUsage{
		{Scope: "models/a", Files: 2 * n, LogicalBytes: 2 * n * 10, UniqueBytes: 100, SharedBytes: 400, Xorbs: 2},
		{Scope: "models/b", Files: n, LogicalBytes: n * 10, UniqueBytes: 200, Xorbs: 1},
		{Scope: "models/c", Files: n, LogicalBytes: n * 10, SharedBytes: 400, Xorbs: 1},
	}
	if len(u.Scopes) != len(want) {
		t.Fatalf("%d scopes (first %+v), want %+v", len(u.Scopes), u.Scopes[0], want)
	}
	for i := range want {
		if u.Scopes[i] != want[i] {
			t.Errorf("scope %d: %+v, want %+v", i, u.Scopes[i], want[i])
		}
	}
	wt := lifecycle.Totals{Scopes: 3, Files: 4 * n, LogicalBytes: 4 * n * 10, StoredBytes: 700, SharedBytes: 400, Xorbs: 3}
	if u.Totals != wt {
		t.Errorf("totals %+v, want %+v", u.Totals, wt)
	}
	if got := u.Scope("models/b"); got != want[1] {
		t.Errorf("Scope(models/b) = %+v, want %+v", got, want[1])
	}
}
