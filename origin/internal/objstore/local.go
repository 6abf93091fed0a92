package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
)

// Local is an ObjectStore in a directory of the local file system. Objects are spread over
// fan-out directories named after the first two characters of the key's last segment:
//
//	<root>/
//	├── xorbs/default/_3f/
//	│   ├── 3f9a…e1          object "xorbs/default/3f9a…e1"
//	│   └── .put-2210937     a Put in flight (a temporary file, never visible under a key)
//	└── shards/_a0/
//	    └── a01b…77          object "shards/a01b…77"
//
// Fan-out directories start with '_' and temporary files with '.', which no key segment may
// (CheckKey), so neither can collide with an object or a key's directory. Put writes a temporary
// file in the object's directory, fsyncs it, renames it over the final name and fsyncs the
// directory; a directory created on the way is made durable by fsyncing its parent. Create does
// the same but links the temporary file to the final name instead (link(2) fails with EEXIST
// when the name exists, atomically, also between processes) and then removes the temporary
// name, so the root must be on a file system with hard links. A crash mid-Put can leave a
// ".put-*" file behind (a staged object's lives while its upload streams in): it is garbage,
// visible under no key, and the garbage collector removes it once it is older than its grace
// period (RemoveTemps, staged.go).
type Local struct {
	root string

	mu   sync.Mutex
	dirs map[string]bool // directories known to exist durably (bounded by the key layout)
}

var _ ObjectStore = (*Local)(nil)

// localCopyBuf bounds the copy buffer of a Put; smaller objects get a buffer of their size.
const localCopyBuf = 1 << 20

// NewLocal opens (creating if needed) the store rooted at dir.
func NewLocal(dir string) (*Local, error) {
	if dir == "" {
		return nil, errors.New("objstore: local store needs a directory")
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("objstore: local root %q: %w", dir, err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("objstore: create local root: %w", err)
	}
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("objstore: local root: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("objstore: local root %s is not a directory", root)
	}
	if err := syncDir(filepath.Dir(root)); err != nil {
		return nil, fmt.Errorf("objstore: sync parent of local root: %w", err)
	}
	return &Local{root: root, dirs: map[string]bool{root: true}}, nil
}

// Root returns the store's directory.
func (l *Local) Root() string { return l.root }

// path maps a checked key to its file: <root>/<dirs of key>/_<first 2 chars of name>/<name>.
func (l *Local) path(key string) string {
	dir, name := path.Split(key)
	fan := name
	if len(fan) > 2 {
		fan = fan[:2]
	}
	return filepath.Join(l.root, filepath.FromSlash(dir), "_"+fan, name)
}

// Put implements ObjectStore.
func (l *Local) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return l.write(ctx, "put", key, r, size)
}

// Create implements ObjectStore. A key found to exist before the body is read fails at once,
// without reading r; otherwise the body is written and made durable first and the link decides.
func (l *Local) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if _, err := os.Lstat(l.path(key)); err == nil {
		return fmt.Errorf("create %s: %w", key, ErrExists)
	}
	return l.write(ctx, "create", key, r, size)
}

// write is Put (op "put": rename over the key) and Create (op "create": link to the key), both
// through a Staged object (staged.go): a temporary file, fsynced, then renamed or linked, and the
// directory fsynced.
func (l *Local) write(ctx context.Context, op, key string, r io.Reader, size int64) (err error) {
	if err := CheckKey(key); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("%s %s: %w: negative size %d", op, key, ErrSize, size)
	}
	st, err := l.stage(ctx, op, op, key)
	if err != nil {
		return err
	}
	defer func() {
		// The temporary name goes in every case (with a crash before it does, it stays behind
		// as garbage like any ".put-*" file); after a rename there is none.
		if cerr := st.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()

	src := newExactReader(ctx, r, size)
	buf := make([]byte, min(max(size, 512), localCopyBuf))
	_, cerr := io.CopyBuffer(writerOnly{st.f}, src, buf)
	if err := src.done(); err != nil { // the body's fault (or the caller's ctx), not the store's
		return fmt.Errorf("%s %s: %w", op, key, err)
	}
	if cerr != nil {
		return l.ioErr(op, key, cerr)
	}
	if op == "create" {
		return st.Commit(ctx)
	}
	return st.Replace(ctx)
}

// Get implements ObjectStore. The reader is an *os.File.
func (l *Local) Get(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	f, size, err := l.open(ctx, "get", key)
	if err != nil {
		return nil, 0, err
	}
	return f, size, nil
}

// GetRange implements ObjectStore. The reader implements io.WriterTo over an io.LimitedReader
// of the file, so copying it to a plain-HTTP response can use sendfile.
func (l *Local) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := checkRange(off, n); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	f, size, err := l.open(ctx, "get", key)
	if err != nil {
		return nil, err
	}
	if off+n > size {
		f.Close()
		return nil, fmt.Errorf("get %s: %w: [%d, %d) of %d bytes", key, ErrRange, off, off+n, size)
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		f.Close()
		return nil, l.ioErr("get", key, err)
	}
	return &fileRange{f: f, lr: io.LimitedReader{R: f, N: n}}, nil
}

// Stat implements ObjectStore.
func (l *Local) Stat(ctx context.Context, key string) (int64, error) {
	if err := CheckKey(key); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("stat %s: %w", key, err)
	}
	fi, err := os.Stat(l.path(key))
	if err != nil {
		return 0, l.ioErr("stat", key, err)
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("stat %s: %w: not a regular file", key, ErrUnavailable)
	}
	return fi.Size(), nil
}

// Delete implements ObjectStore.
func (l *Local) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	p := l.path(key)
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return l.ioErr("delete", key, err)
	}
	if err := syncDir(filepath.Dir(p)); err != nil {
		return l.ioErr("delete", key, err)
	}
	return nil
}

// Ping implements ObjectStore: the root must exist and accept a new file.
func (l *Local) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	f, err := os.CreateTemp(l.root, ".ping-*")
	if err != nil {
		return fmt.Errorf("ping %s: %w: %w", l.root, ErrUnavailable, err)
	}
	name := f.Name()
	cerr := f.Close()
	rerr := os.Remove(name)
	if err := errors.Join(cerr, rerr); err != nil {
		return fmt.Errorf("ping %s: %w: %w", l.root, ErrUnavailable, err)
	}
	return nil
}

// List implements ObjectStore. It walks the prefix's directory tree in lexical order; entries
// that are not objects (temporary ".put-*" files, files outside a fan-out directory or in the
// wrong one) are skipped. A directory that vanishes during the walk is skipped too.
func (l *Local) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	if err := CheckPrefix(prefix); err != nil {
		return err
	}
	start := filepath.Join(l.root, filepath.FromSlash(prefix))
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return l.ioErr("list", prefix, err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("list %s: %w", prefix, err)
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		fan := filepath.Dir(p)
		rel, rerr := filepath.Rel(l.root, filepath.Join(filepath.Dir(fan), d.Name()))
		if rerr != nil || !strings.HasPrefix(filepath.Base(fan), "_") {
			return nil
		}
		key := filepath.ToSlash(rel)
		if CheckKey(key) != nil || l.path(key) != p {
			return nil
		}
		fi, ierr := d.Info()
		if errors.Is(ierr, fs.ErrNotExist) {
			return nil // deleted since the directory was read
		}
		if ierr != nil {
			return l.ioErr("list", key, ierr)
		}
		if err := fn(ObjectInfo{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}); err != nil {
			return &fnError{err}
		}
		return nil
	})
	var fe *fnError
	if errors.As(err, &fe) {
		return fe.err
	}
	return err
}

// fnError carries an error of List's callback through WalkDir unchanged.
type fnError struct{ err error }

func (e *fnError) Error() string { return "" }

func (l *Local) open(ctx context.Context, op, key string) (*os.File, int64, error) {
	if err := CheckKey(key); err != nil {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("%s %s: %w", op, key, err)
	}
	f, err := os.Open(l.path(key))
	if err != nil {
		return nil, 0, l.ioErr(op, key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, l.ioErr(op, key, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s %s: %w: not a regular file", op, key, ErrUnavailable)
	}
	return f, fi.Size(), nil
}

// ensureDir creates dir and any missing parents below the root, each made durable by fsyncing
// its parent. The parent is synced even when Mkdir finds the directory already there, since a
// concurrent Put may have created it and not yet synced.
func (l *Local) ensureDir(dir string) error {
	l.mu.Lock()
	known := l.dirs[dir]
	l.mu.Unlock()
	if known {
		return nil
	}
	parent := filepath.Dir(dir)
	if len(parent) < len(l.root) { // cannot happen for a checked key; guards the recursion
		return fmt.Errorf("directory %s outside root %s", dir, l.root)
	}
	if err := l.ensureDir(parent); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := syncDir(parent); err != nil {
		return err
	}
	l.mu.Lock()
	l.dirs[dir] = true
	l.mu.Unlock()
	return nil
}

// ioErr wraps a file-system error: a missing file is ErrNotFound, anything else means the disk
// cannot serve us (full, read-only, failing) and is ErrUnavailable.
func (l *Local) ioErr(op, key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s %s: %w", op, key, ErrNotFound)
	}
	return fmt.Errorf("%s %s: %w: %w", op, key, ErrUnavailable, err)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	cerr := d.Close()
	return errors.Join(serr, cerr)
}

// writerOnly hides *os.File's ReadFrom so io.CopyBuffer uses the given buffer.
type writerOnly struct{ io.Writer }

// fileRange is n bytes of an open file from its current offset.
type fileRange struct {
	f  *os.File
	lr io.LimitedReader
}

func (r *fileRange) Read(p []byte) (int, error) { return r.lr.Read(p) }

// WriteTo lets io.Copy hand the *io.LimitedReader of the file to w's ReadFrom (sendfile on a
// TCP connection).
func (r *fileRange) WriteTo(w io.Writer) (int64, error) { return io.Copy(w, &r.lr) }

func (r *fileRange) Close() error { return r.f.Close() }
