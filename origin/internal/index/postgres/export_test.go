package postgres

import (
	"context"
	"strings"
)

// ExplainLookups fills every table with n synthetic rows (1,000 scopes), analyzes them and
// returns, for every lookup statement, the text of its EXPLAIN.
func (db *DB) ExplainLookups(ctx context.Context, n int) (map[string]string, error) {
	fill := []string{
		`INSERT INTO xorbs SELECT sha256(i::text::bytea), i, '\x01' FROM generate_series(1, $1) i`,
		`INSERT INTO files SELECT sha256(i::text::bytea), '\x01' FROM generate_series(1, $1) i`,
		`INSERT INTO visibility SELECT 'models/s/' || (i % 1000), sha256(i::text::bytea) FROM generate_series(1, $1) i`,
		`INSERT INTO shards(hash, scope, xorbs) SELECT sha256(i::text::bytea), 'models/s/' || (i % 1000), '' FROM generate_series(1, $1) i`,
		`INSERT INTO dedup SELECT sha256((-i)::text::bytea), sha256(i::text::bytea) FROM generate_series(1, $1) i`,
		`INSERT INTO events(scope) SELECT 'models/s/' || (i % 1000) FROM generate_series(1, $1) i`,
	}
	for _, q := range fill {
		if _, err := db.pool.Exec(ctx, q, n); err != nil {
			return nil, err
		}
	}
	if _, err := db.pool.Exec(ctx, `ANALYZE xorbs, files, visibility, shards, dedup, events`); err != nil {
		return nil, err
	}
	k := make([]byte, 32)
	qs := map[string]struct {
		q    string
		args []any
	}{
		"XorbSize":  {qXorbSize, []any{k}},
		"Layouts":   {qLayouts, []any{[][]byte{k, k, k}}},
		"File":      {qFile, []any{"models/s/7", k}},
		"Dedup":     {qDedup, []any{k}},
		"Events":    {qEvents, []any{int64(5), 10}},
		"HideScope": {qHideScope, []any{"models/s/7"}},
		"HideFiles": {qHideFiles, []any{"models/s/7", [][]byte{k}}},
	}
	out := make(map[string]string, len(qs))
	for name, q := range qs {
		rows, err := db.pool.Query(ctx, "EXPLAIN "+q.q, q.args...)
		if err != nil {
			return nil, err
		}
		var lines []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				rows.Close()
				return nil, err
			}
			lines = append(lines, line)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		out[name] = strings.Join(lines, "\n")
	}
	return out, nil
}
