package index

import "github.com/xetcdn/xetcdn/shared/xet/hash"

// DedupFilter is an index that can tell in memory, without I/O, that a chunk has no dedup entry
// (both backends' filters of their dedup tables; on Postgres "always" within the bounds of
// docs/origin.md, "Dedup filter on Postgres"). A "true" is right; a "false" says nothing, and
// DedupXorbs must be asked.
type DedupFilter interface {
	DedupAbsent(chunk hash.Hash) bool
}

// DedupFilterOf returns the DedupFilter under idx's decorators, or false when the backend has
// none. The dedup route asks it before DedupXorbs,
// so that a miss costs no decorator work (a timeout context, a metrics observation) either:
// such misses are not counted as index calls.
func DedupFilterOf(idx any) (DedupFilter, bool) {
	for {
		if f, ok := idx.(DedupFilter); ok {
			return f, true
		}
		u, ok := idx.(interface{ Unwrap() Index })
		if !ok {
			return nil, false
		}
		idx = u.Unwrap()
	}
}
