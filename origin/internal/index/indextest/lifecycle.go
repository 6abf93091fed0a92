package indextest

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// testDelete: Delete removes visibility like Hide, reports what it removed, records one event
// per delete that removed something, and nothing (no event) for what was not visible.
func testDelete(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(21)
	a := g.Registration("models/acme/a", 3, 1, 1)
	mustRegister(t, ix, a, true)
	other := *a
	other.Scope = "models/acme/fork"
	mustRegister(t, ix, &other, false)
	if err := ix.RecordPossession(ctx, other.Scope, a.Files[0].Terms[0].Xorb); err != nil {
		t.Fatal(err)
	}

	// Nothing visible: ErrNotFound, and no event.
	for _, tc := range []struct {
		scope string
		files []hash.Hash
	}{
		{a.Scope, []hash.Hash{g.Hash()}},
		{"models/acme/none", nil},
		{"models/acme/none", []hash.Hash{a.Files[0].Hash}},
	} {
		if n, err := ix.Delete(ctx, tc.scope, tc.files); !errors.Is(err, index.ErrNotFound) || n != 0 {
			t.Fatalf("Delete(%q, %d files) of nothing visible = %d, %v; want 0, ErrNotFound", tc.scope, len(tc.files), n, err)
		}
	}
	if evs, err := ix.Events(ctx, 0, 0); err != nil || len(evs) != 0 {
		t.Fatalf("Events after deletes of nothing = %v, %v; want none", evs, err)
	}
	if _, err := ix.Delete(ctx, "", nil); !errors.Is(err, index.ErrInvalid) {
		t.Fatalf("Delete with an empty scope = %v; want ErrInvalid", err)
	}

	// One visible and one unknown file (and a duplicate): 1 removed; the other scope keeps it.
	unknown := g.Hash()
	if n, err := ix.Delete(ctx, a.Scope, []hash.Hash{a.Files[1].Hash, unknown, a.Files[1].Hash}); err != nil || n != 1 {
		t.Fatalf("Delete(one file) = %d, %v; want 1, nil", n, err)
	}
	wantHidden(t, ix, a.Files[1].Hash, a.Scope)
	wantFile(t, ix, a.Files[1], other.Scope)
	wantFile(t, ix, a.Files[0], a.Scope)
	if n, err := ix.Delete(ctx, a.Scope, []hash.Hash{a.Files[1].Hash}); !errors.Is(err, index.ErrNotFound) || n != 0 {
		t.Fatalf("Delete of a deleted file = %d, %v; want 0, ErrNotFound", n, err)
	}

	// The whole other scope: every file, and its possession rows.
	if n, err := ix.Delete(ctx, other.Scope, nil); err != nil || n != len(a.Files) {
		t.Fatalf("Delete(scope) = %d, %v; want %d, nil", n, err, len(a.Files))
	}
	for _, f := range a.Files {
		wantHidden(t, ix, f.Hash, other.Scope)
	}
	wantFile(t, ix, a.Files[2], a.Scope)
	x := a.Files[0].Terms[0].Xorb
	if got, err := ix.Possessed(ctx, other.Scope, []hash.Hash{x}); err != nil || got[x] {
		t.Fatalf("Possessed after the scope's deletion = %v, %v; want none", got, err)
	}

	evs, err := ix.Events(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// An event names the files asked (edges drop what they cached of each).
	if len(evs) != 2 || evs[0].Scope != a.Scope || !slices.Equal(evs[0].Files, index.SortedUnique([]hash.Hash{a.Files[1].Hash, unknown})) ||
		evs[1].Scope != other.Scope || evs[1].Files != nil {
		t.Fatalf("events = %+v; want one for the file delete of %q, one whole-scope for %q", evs, a.Scope, other.Scope)
	}
	// Registering again makes the files visible again: a deletion is not a ban.
	mustRegister(t, ix, &other, false)
	wantFile(t, ix, a.Files[1], other.Scope)
}

// testVisible: paging through every visibility row in (scope, file) order with its record.
func testVisible(t *testing.T, ix index.Index) {
	ctx := ctxOf(t)
	g := NewGen(22)
	if got, err := ix.Visible(ctx, index.VisibleKey{}, 0); err != nil || len(got) != 0 {
		t.Fatalf("Visible on an empty index = %v, %v; want none", got, err)
	}
	want := map[index.VisibleKey][]byte{}
	for _, scope := range []string{"models/b", "models/a", "models/a/x", "datasets/z"} {
		r := g.Registration(scope, 4, 1, 0)
		mustRegister(t, ix, r, true)
		for _, f := range r.Files {
			b, err := f.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			want[index.VisibleKey{Scope: scope, File: f.Hash}] = b
		}
	}
	var (
		got   []index.VisibleFile
		after index.VisibleKey
	)
	for page := 0; ; page++ {
		if page > len(want) {
			t.Fatal("Visible does not end")
		}
		p, err := ix.Visible(ctx, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(p) > 3 {
			t.Fatalf("page of %d rows, limit 3", len(p))
		}
		if len(p) == 0 {
			break
		}
		got = append(got, p...)
		after = p[len(p)-1].VisibleKey
	}
	if len(got) != len(want) {
		t.Fatalf("Visible returned %d rows, want %d", len(got), len(want))
	}
	for i, v := range got {
		if w, ok := want[v.VisibleKey]; !ok || !bytes.Equal(w, v.Record) {
			t.Errorf("row %d (%q, %s): unexpected or wrong record", i, v.Scope, v.File)
		}
		if i > 0 {
			p := got[i-1]
			if p.Scope > v.Scope || p.Scope == v.Scope && bytes.Compare(p.File[:], v.File[:]) >= 0 {
				t.Errorf("row %d out of (scope, file) order", i)
			}
		}
	}
}
