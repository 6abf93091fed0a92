package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dirStore is a stand-in for the local object store until origin/internal/objstore lands:
// a directory with atomic renames. Replace openLocalStore with the real one then.
type dirStore struct{ root string }

func openLocalStore(t testing.TB, dir string) Objects {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &dirStore{root: dir}
}

var errStoreNotFound = errors.New("store: not found")

func (d *dirStore) path(key string) string {
	return filepath.Join(d.root, strings.ReplaceAll(key, "/", "_"))
}

func (d *dirStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	tmp, err := os.CreateTemp(d.root, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, r)
	if err == nil && n != size {
		err = fmt.Errorf("short put: %d of %d", n, size)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), d.path(key))
}

func (d *dirStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	b, err := os.ReadFile(d.path(key))
	if err != nil {
		return nil, errStoreNotFound
	}
	if off+n > int64(len(b)) {
		return nil, fmt.Errorf("range past end")
	}
	return io.NopCloser(bytes.NewReader(b[off : off+n])), nil
}

func (d *dirStore) Ping(ctx context.Context) error { return nil }

// has reports whether key exists.
func (d *dirStore) has(key string) bool {
	_, err := os.Stat(d.path(key))
	return err == nil
}
