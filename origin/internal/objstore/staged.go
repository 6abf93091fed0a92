package objstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Stager is a store that takes an object whose length is not known in advance, written piece
// by piece by the caller (Local). The origin streams xorb uploads into it while it validates
// them, instead of holding the body in memory (docs/decisions.md, "Streamed xorb uploads").
type Stager interface {
	// Stage starts an object for key. Nothing is visible under key until Commit.
	Stage(ctx context.Context, key string) (*Staged, error)
}

// StagerOf returns the Stager under s's decorators (Timeouts has nothing to bound in a write to
// the local disk that the caller paces; Metrics counts each Commit as a Create call of the
// object's size), or false when the store has none.
func StagerOf(s any) (Stager, bool) {
	var obs []func(start time.Time, err error, n int64)
	for {
		if st, ok := s.(Stager); ok {
			if len(obs) == 0 {
				return st, true
			}
			return observedStager{st, obs}, true
		}
		if m, ok := s.(*Metrics); ok {
			obs = append(obs, func(start time.Time, err error, n int64) { m.observe("Create", start, err, n) })
		}
		u, ok := s.(interface{ Unwrap() ObjectStore })
		if !ok {
			return nil, false
		}
		s = u.Unwrap()
	}
}

// observedStager gives the objects it stages the observers of the Metrics layers above it.
type observedStager struct {
	next Stager
	obs  []func(start time.Time, err error, n int64)
}

func (o observedStager) Stage(ctx context.Context, key string) (*Staged, error) {
	st, err := o.next.Stage(ctx, key)
	if st != nil {
		st.obs = o.obs
	}
	return st, err
}

// Staged is an object being written: its bytes go to a temporary ".put-*" file in the key's
// directory, locked (lockTemp) and open until Close, so that no collector removes it meanwhile
// (RemoveTemps). Commit makes it durable and links it to the key (Create's contract: it never
// replaces an object); Close removes the temporary name, and with it everything of an object
// that was not committed. A Staged is used by one goroutine.
type Staged struct {
	l        *Local
	stageOp  string // in the errors of Write and Close
	op       string // in the errors of Commit and Replace
	key, p   string
	tmp      string
	f        *os.File
	n        int64
	synced   bool
	writeErr error
	obs      []func(start time.Time, err error, n int64) // Metrics layers (StagerOf)
}

var _ Stager = (*Local)(nil)

// Stage implements Stager.
func (l *Local) Stage(ctx context.Context, key string) (*Staged, error) {
	return l.stage(ctx, "stage", "create", key)
}

// stage starts a staged object for key; errors of this step name op, those of its commit
// commitOp (Stage: "stage" and "create"; write: its own op for both).
func (l *Local) stage(ctx context.Context, op, commitOp, key string) (*Staged, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, key, err)
	}
	p := l.path(key)
	if err := l.ensureDir(filepath.Dir(p)); err != nil {
		return nil, l.ioErr(op, key, err)
	}
	// The file is locked for as long as the write lives (lockTemp): a collector never removes
	// it, however long the body takes to arrive. One a collector took between its creation and
	// the lock (it would have to be older than the collector's cutoff) is replaced.
	for range maxTempTries {
		f, err := os.CreateTemp(filepath.Dir(p), ".put-*")
		if err != nil {
			return nil, l.ioErr(op, key, err)
		}
		ok, err := lockTemp(f)
		if err == nil && ok {
			return &Staged{l: l, stageOp: op, op: commitOp, key: key, p: p, tmp: f.Name(), f: f}, nil
		}
		f.Close()
		if err != nil {
			os.Remove(f.Name())
			return nil, l.ioErr(op, key, err)
		}
	}
	return nil, fmt.Errorf("%s %s: %w: temporary files removed by a collector as soon as created", op, key, ErrUnavailable)
}

// maxTempTries bounds the temporary files stage creates for one object.
const maxTempTries = 3

// Write appends to the object. Errors wrap ErrUnavailable (the disk failed).
func (s *Staged) Write(b []byte) (int, error) {
	if s.f == nil || s.synced {
		return 0, fmt.Errorf("%s %s: write after commit or close", s.stageOp, s.key)
	}
	n, err := s.f.Write(b)
	s.n += int64(n)
	if err != nil {
		s.writeErr = s.l.ioErr(s.stageOp, s.key, err)
		return n, s.writeErr
	}
	return n, nil
}

// Size is the number of bytes written.
func (s *Staged) Size() int64 { return s.n }

// Commit makes the object durable and visible under its key: it fsyncs the file, links it to
// the key (ErrExists when the key holds an object: that object stays) and fsyncs the
// directory. The temporary name stays until Close, so Commit may be called again to put the
// same bytes back under the key if the object was deleted since (a deletion by garbage
// collection racing the upload; ingest.Service.PutXorbStream).
func (s *Staged) Commit(ctx context.Context) (err error) {
	if len(s.obs) > 0 {
		start := time.Now()
		defer func() {
			for _, o := range s.obs {
				o(start, err, s.n)
			}
		}()
	}
	if err := s.sync(ctx); err != nil {
		return err
	}
	if err := os.Link(s.tmp, s.p); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s %s: %w", s.op, s.key, ErrExists)
		}
		return s.tempErr(err)
	}
	// Visible now. As in Replace: a failed directory sync is reported, the object stays.
	if err := syncDir(filepath.Dir(s.p)); err != nil {
		return s.l.ioErr(s.op, s.key, err)
	}
	return nil
}

// Replace is Commit as Put commits: the file is renamed over the key (replacing an object
// there), so nothing is left for Close to remove. An upload puts its bytes back with it when
// the key holds another encoding than the one its index row describes (ingest's ensureStored).
func (s *Staged) Replace(ctx context.Context) error {
	if err := s.sync(ctx); err != nil {
		return err
	}
	if err := os.Rename(s.tmp, s.p); err != nil {
		return s.tempErr(err)
	}
	// A Commit linked the file to the key already: rename(2) of two names of one file does
	// nothing, and the temporary name would stay behind.
	os.Remove(s.tmp)
	s.tmp = "" // the name is the key's now
	// From here the object is visible. A failed directory sync is reported, but the object is
	// left in place: removing it could drop an older, durable copy of the same content.
	if err := syncDir(filepath.Dir(s.p)); err != nil {
		return s.l.ioErr(s.op, s.key, err)
	}
	return nil
}

// tempErr reports a failed link or rename of the temporary file. Its name missing is not the
// key missing (ErrNotFound, a 404 for the client): something removed the file of a write in
// flight (an operator, or a collector where there is no flock, templock_other.go), and the write
// may be retried: ErrUnavailable.
func (s *Staged) tempErr(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s %s: %w: temporary file %s removed during the write: %w", s.op, s.key, ErrUnavailable, filepath.Base(s.tmp), err)
	}
	return s.l.ioErr(s.op, s.key, err)
}

// sync makes the written bytes durable (once) and is the last moment to give up with nothing
// visible: it fails when ctx has ended. The file stays open (and locked) until Close.
func (s *Staged) sync(ctx context.Context) error {
	if s.writeErr != nil {
		return s.writeErr
	}
	if s.tmp == "" || s.f == nil {
		return fmt.Errorf("%s %s: commit after close", s.op, s.key)
	}
	if !s.synced {
		if err := s.f.Sync(); err != nil {
			return s.l.ioErr(s.op, s.key, err)
		}
		s.synced = true
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", s.op, s.key, err)
	}
	return nil
}

// Close removes the temporary name (a committed object stays under its key), then closes the
// file, which drops its lock: a collector never finds the name of a live write unlocked. It is
// safe to call more than once.
func (s *Staged) Close() error {
	var err error
	if s.tmp != "" {
		err = os.Remove(s.tmp)
		s.tmp = ""
	}
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return s.l.ioErr(s.stageOp, s.key, err)
	}
	return nil
}

// TempRemover is a store whose writes go through temporary files a crash can leave behind
// (Local's ".put-*": a streamed upload's lives as long as its body takes to arrive). The garbage
// collector's orphan pass removes those older than its cutoff that no live write holds.
type TempRemover interface {
	// RemoveTemps removes (dry run: only counts) the temporary files last modified before
	// before that no write in flight holds (Local: its flock, see Staged); it reports how many
	// and their bytes. A file that vanishes meanwhile (its write finished) is not counted.
	RemoveTemps(ctx context.Context, before time.Time, dryRun bool) (files, bytes int64, err error)
}

// TempRemoverOf returns the TempRemover under s's decorators, or false when the store has none.
func TempRemoverOf(s any) (TempRemover, bool) { return under[TempRemover](s) }

// under returns the first of s and the stores under its decorators (Unwrap) that implements
// T, or false when none does.
func under[T any](s any) (T, bool) {
	for {
		if t, ok := s.(T); ok {
			return t, true
		}
		u, ok := s.(interface{ Unwrap() ObjectStore })
		if !ok {
			var zero T
			return zero, false
		}
		s = u.Unwrap()
	}
}

var _ TempRemover = (*Local)(nil)

// TempFiles calls fn for each temporary ".put-*" file under the root (writes in flight and
// those a crash interrupted), with its path and what Lstat said; a file that vanishes meanwhile
// is skipped. An error of fn stops the walk and is returned.
func (l *Local) TempFiles(ctx context.Context, fn func(path string, fi fs.FileInfo) error) error {
	var fnErr error
	err := filepath.WalkDir(l.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return l.ioErr("list temporary files under", l.root, err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("list temporary files: %w", err)
		}
		if d.IsDir() || !d.Type().IsRegular() || !strings.HasPrefix(d.Name(), ".put-") {
			return nil
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return l.ioErr("list temporary files under", l.root, err)
		}
		if err := fn(p, fi); err != nil {
			fnErr = err
			return fs.SkipAll
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	return err
}

// RemoveTemps implements TempRemover with TempFiles. Age alone does not make a file garbage:
// a write in flight holds its file's flock (Staged) however long its body takes, and its file
// is left alone; a crashed writer's lock went with its process. A file is removed only while
// this call holds its lock, and only if its name still names the file locked.
func (l *Local) RemoveTemps(ctx context.Context, before time.Time, dryRun bool) (files, bytes int64, err error) {
	err = l.TempFiles(ctx, func(p string, fi fs.FileInfo) error {
		if !fi.ModTime().Before(before) {
			return nil
		}
		removed, err := removeUnlocked(p, dryRun)
		if err != nil {
			return l.ioErr("remove temporary files under", l.root, err)
		}
		if removed {
			files++
			bytes += fi.Size()
		}
		return nil
	})
	return files, bytes, err
}

// removeUnlocked removes the temporary file p (dry run: only checks) unless a write in flight
// holds it; it reports whether p was garbage. A file gone meanwhile is not.
func removeUnlocked(p string, dryRun bool) (bool, error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close() // drops the lock, after the removal
	if ok, err := tryLockTemp(f); err != nil || !ok {
		return false, err
	}
	// Still the file locked? (Its writer may have closed it, and a new write reused the name,
	// between the open and the lock.)
	locked, err := f.Stat()
	if err != nil {
		return false, err
	}
	now, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !os.SameFile(locked, now) {
		return false, nil
	}
	if dryRun {
		return true, nil
	}
	if err := os.Remove(p); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return true, nil
}
