package objstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/minio/minio-go/v7"
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

// MatchMover is a store that cannot move an object atomically but can bind a move to the object
// it was asked about: MoveMatch copies the object under from to the key to only if it is still
// the write etag names (an ObjectInfo.ETag from List), so what the destination holds is exactly
// that object, never a copy read earlier nor a newer object written under from since; and then
// removes from. On S3 both steps are conditional only where the service supports it (see
// S3.MoveMatch): there the removal is not, so an object written under from between the two
// steps is removed too.
type MatchMover interface {
	// MoveMatch moves the object under from to the key to (replacing what to held), stamped
	// with the time of the move, if it is the write etag; an empty etag moves whatever is
	// under from at the copy. ErrChanged: from holds another write (nothing was changed);
	// ErrNotFound: from holds nothing.
	MoveMatch(ctx context.Context, from, to, etag string) error
}

// ErrChanged: a conditional request found another write of the object than the one named.
var ErrChanged = errors.New("objstore: object changed")

// MatchMoverOf returns the MatchMover under s's decorators, or false when the store has none.
// The Timeouts decorators it passes still bound it: each of the two requests a move makes
// counts as a step, so a move that makes no progress for twice their bound fails with
// ErrUnavailable.
func MatchMoverOf(s any) (MatchMover, bool) {
	var bounds []*Timeouts
	for {
		if m, ok := s.(MatchMover); ok {
			for i := len(bounds) - 1; i >= 0; i-- {
				m = boundedMatchMover{bounds[i], m}
			}
			return m, true
		}
		if t, ok := s.(*Timeouts); ok {
			bounds = append(bounds, t)
		}
		u, ok := s.(interface{ Unwrap() ObjectStore })
		if !ok {
			return nil, false
		}
		s = u.Unwrap()
	}
}

// boundedMatchMover is a MatchMover found under a Timeouts decorator, bounded by it.
type boundedMatchMover struct {
	t    *Timeouts
	next MatchMover
}

func (b boundedMatchMover) MoveMatch(ctx context.Context, from, to, etag string) error {
	w := newWatchdog(ctx, 2*b.t.d) // the copy and the DELETE
	defer w.cancel()
	err := b.next.MoveMatch(w.ctx, from, to, etag)
	w.disarm()
	return w.err(err)
}

var _ MatchMover = (*S3)(nil)

// MoveMatch implements MatchMover with a server-side copy carrying x-amz-copy-source-if-match
// (the service refuses it with 412 when from is no longer the write etag, and copies nothing),
// then a DELETE of from carrying "If-Match: etag". Services with conditional deletes refuse
// that DELETE with 412 when from was written again after the copy; MoveMatch then deletes its
// copy (conditionally on the copy's own ETag) and returns ErrChanged. MinIO, the service these
// stores are tested on, ignores If-Match on DELETE and deletes whatever is under from: there an
// object written under from between the copy and the DELETE (one round trip) is deleted too
// (docs/decisions.md, 2026-12-03 "S3 orphan moves bound to the listed ETag"). A single copy
// request takes up to 5 GiB.
func (s *S3) MoveMatch(ctx context.Context, from, to, etag string) error {
	for _, k := range []string{from, to} {
		if err := CheckKey(k); err != nil {
			return err
		}
	}
	// Client.CopyObject, not Core.CopyObject: the latter drops the source's conditions.
	src := minio.CopySrcOptions{Bucket: s.bucket, Object: from, MatchETag: etag}
	dst := minio.CopyDestOptions{Bucket: s.bucket, Object: to}
	copied, err := s.core.Client.CopyObject(ctx, dst, src)
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.PreconditionFailed {
			return fmt.Errorf("move %s: %w: not the write %s", from, ErrChanged, etag)
		}
		return s3Err("move", from, err)
	}
	err = s.deleteIfMatch(ctx, from, etag)
	if errors.Is(err, ErrChanged) {
		// The copy is of a write no longer under from: not a trash entry of what is there.
		if derr := s.deleteIfMatch(ctx, to, copied.ETag); derr != nil && !errors.Is(derr, ErrChanged) {
			return fmt.Errorf("%w (and removing the copy: %w)", err, derr)
		}
	}
	return err
}

// deleteIfMatch deletes key with "If-Match: etag" (none for an empty etag): ErrChanged when the
// service refuses it because key holds another write; a missing key is not an error.
func (s *S3) deleteIfMatch(ctx context.Context, key, etag string) error {
	err := s.core.Client.RemoveObject(context.WithValue(ctx, ifMatchKey{}, etag), s.bucket, key, minio.RemoveObjectOptions{})
	if err == nil {
		return nil
	}
	// 409: a concurrent write or delete of key won while the condition was evaluated.
	if resp := minio.ToErrorResponse(err); resp.Code == minio.PreconditionFailed || resp.StatusCode == http.StatusConflict {
		return fmt.Errorf("delete %s: %w: not the write %s", key, ErrChanged, etag)
	}
	if err := s3Err("delete", key, err); !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}
