package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Lifecycle statements (index.Lifecycle).
const (
	qDeletePossession = `DELETE FROM possession WHERE scope = ?`
	qVisible          = `SELECT v.scope, v.file, f.record FROM visibility v JOIN files f ON f.hash = v.file
WHERE (v.scope, v.file) > (?, ?) ORDER BY v.scope, v.file LIMIT ?`
)

// Delete implements index.Lifecycle.
func (db *DB) Delete(ctx context.Context, scope string, files []hash.Hash) (int, error) {
	if err := index.CheckScope(scope); err != nil {
		return 0, err
	}
	keys := index.SortedUnique(files)
	var removed int
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		removed = 0
		if len(keys) == 0 {
			res, err := tx.ExecContext(ctx, qHideScope, scope)
			if err != nil {
				return translate(err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return translate(err)
			}
			removed = int(n)
		} else {
			st, err := tx.PrepareContext(ctx, qHideFile)
			if err != nil {
				return translate(err)
			}
			defer st.Close()
			for _, h := range keys {
				res, err := st.ExecContext(ctx, scope, h[:])
				if err != nil {
					return translate(err)
				}
				n, err := res.RowsAffected()
				if err != nil {
					return translate(err)
				}
				removed += int(n)
			}
		}
		if removed == 0 {
			// The savepoint is rolled back: nothing recorded, no event.
			return fmt.Errorf("%w: nothing visible to delete", index.ErrNotFound)
		}
		if len(keys) == 0 {
			if _, err := tx.ExecContext(ctx, qDeletePossession, scope); err != nil {
				return translate(err)
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO events(scope, files, at) VALUES (?, ?, ?)`,
			scope, index.JoinHashes(keys), time.Now().UnixNano())
		return translate(err)
	})
	if err != nil {
		return 0, fmt.Errorf("delete in %q: %w", scope, err)
	}
	return removed, nil
}

// Visible implements index.Lifecycle.
func (db *DB) Visible(ctx context.Context, after index.VisibleKey, limit int) ([]index.VisibleFile, error) {
	if err := db.read(); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > index.MaxVisiblePage {
		limit = index.MaxVisiblePage
	}
	rows, err := db.r.QueryContext(ctx, qVisible, after.Scope, after.File[:], limit)
	if err != nil {
		return nil, fmt.Errorf("visible: %w", translate(err))
	}
	defer rows.Close()
	var out []index.VisibleFile
	for rows.Next() {
		var (
			v    index.VisibleFile
			file []byte
		)
		if err := rows.Scan(&v.Scope, &file, &v.Record); err != nil {
			return nil, fmt.Errorf("visible: %w", translate(err))
		}
		if v.File, err = index.HashFromBytes(file); err != nil {
			return nil, fmt.Errorf("visible: %w", err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("visible: %w", translate(err))
	}
	return out, nil
}
