package index

import (
	"context"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Lifecycle is part of Index: deleting files and scopes, and the paged scans that usage
// accounting (and garbage collection) read the index with. See docs/decisions.md, "Data
// lifecycle".
//
// Reachability model: a file record is live while at least one (scope, file) visibility row
// names it; a xorb is live while a live file record's terms reference it. A later layer that
// keeps files alive by other means (repository commits, retained history) adds its roots to
// the same walk rather than changing this one: whatever walks Visible also walks its roots.
type Lifecycle interface {
	// Delete removes the visibility of files in scope (every file of the scope when files is
	// empty; then also the scope's possession rows) and appends one Event, in one
	// transaction, like Hide. It returns how many (scope, file) rows it removed. When none of
	// the files (or no file of the scope) was visible, it records nothing and returns an
	// error wrapping ErrNotFound.
	Delete(ctx context.Context, scope string, files []hash.Hash) (int, error)
	// Visible returns up to limit visibility rows after the key after, in (scope, file) order
	// (scopes compared bytewise), each with its file's stored record (recon.FileRecord's
	// encoding). Pass the last key returned to get the next page; the zero key starts at the
	// beginning. A limit <= 0 or above MaxVisiblePage means MaxVisiblePage.
	Visible(ctx context.Context, after VisibleKey, limit int) ([]VisibleFile, error)
}

// MaxVisiblePage is the most rows one Visible call returns.
const MaxVisiblePage = 1000

// VisibleKey is a position in the (scope, file) order of Visible.
type VisibleKey struct {
	Scope string
	File  hash.Hash
}

// VisibleFile is one visibility row and its file's stored record.
type VisibleFile struct {
	VisibleKey
	Record []byte
}
