package objstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Mover is a store that can move an object to another key atomically: what the destination
// holds afterwards is exactly what was under the source at the moment of the move, never a
// copy read earlier. The garbage collector's orphan pass moves an orphan to a trash key instead
// of deleting it, so the bytes it may have to put back are the bytes it took away (docs/
// decisions.md, "Orphans go to the trash, not away").
type Mover interface {
	// Move moves the object under from to the key to (replacing what to held) and stamps it
	// with the time of the move. A missing source is ErrNotFound and changes nothing.
	Move(ctx context.Context, from, to string) error
}

// MoverOf returns the Mover under s's decorators, or false when the store has none.
func MoverOf(s any) (Mover, bool) { return under[Mover](s) }

var _ Mover = (*Local)(nil)

// Move implements Mover with rename(2), atomic within the root's file system; the new name's
// directory is made durable first and both directories are synced after.
func (l *Local) Move(ctx context.Context, from, to string) error {
	for _, k := range []string{from, to} {
		if err := CheckKey(k); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("move %s: %w", from, err)
	}
	src, dst := l.path(from), l.path(to)
	if err := l.ensureDir(filepath.Dir(dst)); err != nil {
		return l.ioErr("move", to, err)
	}
	if err := os.Rename(src, dst); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("move %s: %w", from, ErrNotFound)
		}
		return l.ioErr("move", from, err)
	}
	now := time.Now()
	if err := os.Chtimes(dst, now, now); err != nil {
		return l.ioErr("move", to, err)
	}
	for _, d := range []string{filepath.Dir(dst), filepath.Dir(src)} {
		if err := syncDir(d); err != nil {
			return l.ioErr("move", from, err)
		}
	}
	return nil
}
