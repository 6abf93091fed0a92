package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Lifecycle statements (index.Lifecycle).
const (
	qDeletePossession = `DELETE FROM possession WHERE scope = $1`
	qVisible          = `SELECT v.scope, v.file, f.record FROM visibility v JOIN files f ON f.hash = v.file
WHERE (v.scope, v.file) > ($1, $2) ORDER BY v.scope, v.file LIMIT $3`
)

// Delete implements index.Lifecycle.
func (db *DB) Delete(ctx context.Context, scope string, files []hash.Hash) (int, error) {
	if err := index.CheckScope(scope); err != nil {
		return 0, err
	}
	if err := db.check(); err != nil {
		return 0, err
	}
	keys := index.SortedUnique(files)
	var removed int
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		// The events lock first, as Hide takes it: event order is commit order.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockEvents); err != nil {
			return err
		}
		var (
			tag pgconn.CommandTag
			err error
		)
		if len(keys) == 0 {
			tag, err = tx.Exec(ctx, qHideScope, scope)
		} else {
			tag, err = tx.Exec(ctx, qHideFiles, scope, hashArgs(keys))
		}
		if err != nil {
			return err
		}
		removed = int(tag.RowsAffected())
		if removed == 0 {
			// Rolled back by BeginFunc: nothing recorded, no event.
			return fmt.Errorf("%w: nothing visible to delete", index.ErrNotFound)
		}
		if len(keys) == 0 {
			if _, err := tx.Exec(ctx, qDeletePossession, scope); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, qAddEvent, scope, index.JoinHashes(keys))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete in %q: %w", scope, translate(err))
	}
	return removed, nil
}

// Visible implements index.Lifecycle.
func (db *DB) Visible(ctx context.Context, after index.VisibleKey, limit int) ([]index.VisibleFile, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > index.MaxVisiblePage {
		limit = index.MaxVisiblePage
	}
	var out []index.VisibleFile
	err := db.retry(ctx, func() error {
		out = nil
		rows, err := db.pool.Query(ctx, qVisible, after.Scope, after.File[:], limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				v    index.VisibleFile
				file []byte
			)
			if err := rows.Scan(&v.Scope, &file, &v.Record); err != nil {
				return err
			}
			if v.File, err = index.HashFromBytes(file); err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("visible: %w", translate(err))
	}
	return out, nil
}
