// Package lifecycle is the origin's data lifecycle outside the request path: usage accounting
// per scope over the index's reachability model (index.Lifecycle). Deletion itself is an index
// call (index.Lifecycle.Delete) made by the server's routes and by `xet-origin delete`.
package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Index is the part of the index usage accounting reads.
type Index interface {
	VisibleFiles(ctx context.Context, after index.VisibleKey, limit int) ([]index.VisibleFile, error)
	XorbSize(ctx context.Context, xorb hash.Hash) (uint64, error)
}

// ScopeUsage is what one scope holds.
type ScopeUsage struct {
	Scope string `json:"scope"`
	Files int64  `json:"files"` // visible files
	// LogicalBytes is the sum of the sizes of its visible files (what a download of all of
	// them transfers, before compression).
	LogicalBytes uint64 `json:"logical_bytes"`
	// UniqueBytes is the stored size of the xorbs only this scope's files reference: what
	// deleting the scope frees once garbage collection has run.
	UniqueBytes uint64 `json:"unique_bytes"`
	// SharedBytes is the stored size of the xorbs this scope's files reference that files of
	// other scopes reference too.
	SharedBytes uint64 `json:"shared_bytes"`
	Xorbs       int64  `json:"xorbs"` // distinct xorbs referenced
}

// Usage is the usage of every scope with a visible file, in scope order, and the store's
// totals.
type Usage struct {
	Scopes []ScopeUsage `json:"scopes"`
	Totals Totals       `json:"totals"`
}

// Totals are the store's figures over every visible file.
type Totals struct {
	Scopes       int64  `json:"scopes"`
	Files        int64  `json:"files"`         // (scope, file) pairs
	LogicalBytes uint64 `json:"logical_bytes"` // sum over scopes of their logical bytes
	// StoredBytes is the stored size of every xorb a visible file references (each once).
	StoredBytes uint64 `json:"stored_bytes"`
	// SharedBytes is the part of StoredBytes referenced by more than one scope.
	SharedBytes uint64 `json:"shared_bytes"`
	Xorbs       int64  `json:"xorbs"`
}

// Compute walks every visible (scope, file) row once (index.Lifecycle.VisibleFiles, page by
// page, in file order) and asks the stored size of every referenced xorb once. Its memory is
// about 40 bytes per referenced xorb (plus 4 per extra scope of a shared one) and a few per
// scope; its index calls, one per page of visibility rows plus one per xorb. A scope that
// reaches its files through later roots (repository history) is counted the same way once those
// roots are walked here.
func Compute(ctx context.Context, ix Index) (*Usage, error) {
	u := &Usage{Scopes: []ScopeUsage{}}
	// The scopes (indexes into u.Scopes, in the order first met) referencing each xorb, sorted;
	// the rows come in file order, so a scope's rows are spread over the whole walk.
	refs := make(map[hash.Hash][]int32)
	scopes := make(map[string]int32)
	var after index.VisibleKey
	for {
		page, err := ix.VisibleFiles(ctx, after, index.MaxVisiblePage)
		if err != nil {
			return nil, fmt.Errorf("usage: %w", err)
		}
		if len(page) == 0 {
			break
		}
		for _, v := range page {
			rec, err := index.DecodeFile(v.File, v.Record)
			if err != nil {
				return nil, fmt.Errorf("usage: %w", err)
			}
			si, ok := scopes[v.Scope]
			if !ok {
				si = int32(len(u.Scopes))
				scopes[v.Scope] = si
				u.Scopes = append(u.Scopes, ScopeUsage{Scope: v.Scope})
			}
			s := &u.Scopes[si]
			s.Files++
			s.LogicalBytes += rec.Size
			for _, t := range rec.Terms {
				l := refs[t.Xorb]
				if i, found := slices.BinarySearch(l, si); !found {
					refs[t.Xorb] = slices.Insert(l, i, si)
				}
			}
		}
		after = page[len(page)-1].VisibleKey
	}
	keys := make([]hash.Hash, 0, len(refs))
	for h := range refs {
		keys = append(keys, h)
	}
	slices.SortFunc(keys, func(a, b hash.Hash) int { return bytes.Compare(a[:], b[:]) })
	for _, h := range keys {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		size, err := ix.XorbSize(ctx, h)
		if err != nil {
			return nil, fmt.Errorf("usage: xorb %s: %w", h, err)
		}
		l := refs[h]
		u.Totals.Xorbs++
		u.Totals.StoredBytes += size
		if len(l) > 1 {
			u.Totals.SharedBytes += size
		}
		for _, si := range l {
			s := &u.Scopes[si]
			s.Xorbs++
			if len(l) == 1 {
				s.UniqueBytes += size
			} else {
				s.SharedBytes += size
			}
		}
	}
	slices.SortFunc(u.Scopes, func(a, b ScopeUsage) int { return strings.Compare(a.Scope, b.Scope) })
	for _, s := range u.Scopes {
		u.Totals.Scopes++
		u.Totals.Files += s.Files
		u.Totals.LogicalBytes += s.LogicalBytes
	}
	return u, nil
}

// Scope returns the usage of scope, or a zero usage (no visible file) when it has none.
func (u *Usage) Scope(scope string) ScopeUsage {
	i, ok := slices.BinarySearchFunc(u.Scopes, scope, func(s ScopeUsage, t string) int { return strings.Compare(s.Scope, t) })
	if !ok {
		return ScopeUsage{Scope: scope}
	}
	return u.Scopes[i]
}
