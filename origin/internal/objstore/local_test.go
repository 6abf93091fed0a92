package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/origin/internal/objstore/objstoretest"
)

func newLocal(tb testing.TB) objstore.ObjectStore {
	s, err := objstore.NewLocal(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func TestLocal(t *testing.T) { objstoretest.Run(t, newLocal) }

func BenchmarkLocal(b *testing.B) { objstoretest.Bench(b, newLocal) }

// The on-disk layout is part of the contract operators see: objects in fan-out directories,
// no temporary file left behind by a successful or failed Put or Create (also by the Creates
// that lose a race for one key).
func TestLocalLayout(t *testing.T) {
	root := t.TempDir()
	s, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := "xorbs/default/3f9a00e1"
	if err := s.Put(ctx, key, strings.NewReader("hello"), 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "shards/a", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "xorbs/default/3f00", strings.NewReader("short"), 99); !errors.Is(err, objstore.ErrSize) {
		t.Fatalf("short Put: %v", err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			body := strings.Repeat("c", 1000+i)
			if err := s.Create(ctx, "xorbs/default/3fcc", strings.NewReader(body), int64(len(body))); err != nil && !errors.Is(err, objstore.ErrExists) {
				t.Errorf("Create: %v", err)
			}
		})
	}
	wg.Wait()
	if err := s.Create(ctx, "xorbs/default/3fdd", strings.NewReader("short"), 99); !errors.Is(err, objstore.ErrSize) {
		t.Fatalf("short Create: %v", err)
	}
	var files []string
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"shards/_a/a", "xorbs/default/_3f/3f9a00e1", "xorbs/default/_3f/3fcc"}
	if strings.Join(files, " ") != strings.Join(want, " ") {
		t.Fatalf("files under root = %q, want %q", files, want)
	}
}

// A root that cannot take writes makes Put and Ping report ErrUnavailable (→ 503), not a
// client error.
func TestLocalUnavailable(t *testing.T) {
	root := t.TempDir()
	s, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	// Replace the key's parent directory with a file: every write below it fails, for root too.
	if err := os.WriteFile(filepath.Join(root, "xorbs"), []byte("in the way"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = s.Put(context.Background(), "xorbs/default/abcd", bytes.NewReader([]byte("x")), 1)
	if !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("Put under a blocked directory: err = %v, want ErrUnavailable", err)
	}
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(context.Background()); !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("Ping with the root gone: err = %v, want ErrUnavailable", err)
	}
}

func TestNewLocalErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"", file, filepath.Join(file, "below")} {
		if _, err := objstore.NewLocal(dir); err == nil {
			t.Errorf("NewLocal(%q) succeeded", dir)
		}
	}
}
