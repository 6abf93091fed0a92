package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/origin/internal/objstore"
)

// putFiles lists the temporary ".put-*" files under root.
func putFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".put-") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestStaged: a staged object is invisible until Commit, durable and visible after it; Close
// without Commit leaves nothing; Commit onto a taken key is ErrExists and keeps the stored
// object; a Commit after the object was deleted puts the same bytes back; Close removes the
// temporary name in every case.
func TestStaged(t *testing.T) {
	ctx := context.Background()
	l, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Through the production decorators: StagerOf finds the local store, and Metrics counts
	// the commits as creates.
	tm, err := objstore.NewTimeouts(l, objstore.TimeoutOptions{Timeout: 10 * time.Second, LocalBodies: true})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := objstore.NewMetrics(tm, reg)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := objstore.StagerOf(m)
	if !ok {
		t.Fatal("StagerOf found no stager under Metrics and Timeouts")
	}

	// Abandoned: nothing stays.
	s, err := st.Stage(ctx, "xorbs/default/aa01")
	if err != nil {
		t.Fatal(err)
	}
	s.Write([]byte("partial"))
	if _, err := l.Stat(ctx, "xorbs/default/aa01"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("staged object visible before Commit: %v", err)
	}
	s.Close()
	if left := putFiles(t, l.Root()); len(left) > 0 {
		t.Fatalf("abandoned stage left %v", left)
	}

	// Committed.
	s, err = st.Stage(ctx, "xorbs/default/aa01")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("hello, ")); err != nil {
		t.Fatal(err)
	}
	s.Write([]byte("world"))
	if err := s.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(t, l, "xorbs/default/aa01"); got != "hello, world" {
		t.Fatalf("stored %q", got)
	}
	// Deleted under it (garbage collection): Commit again restores the bytes.
	if err := l.Delete(ctx, "xorbs/default/aa01"); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx); err != nil {
		t.Fatalf("Commit after a deletion: %v", err)
	}
	if got := get(t, l, "xorbs/default/aa01"); got != "hello, world" {
		t.Fatalf("restored %q", got)
	}
	s.Close()
	if err := s.Commit(ctx); err == nil {
		t.Fatal("Commit after Close succeeded")
	}

	// A taken key: ErrExists, the stored object stays.
	s, err = st.Stage(ctx, "xorbs/default/aa01")
	if err != nil {
		t.Fatal(err)
	}
	s.Write([]byte("other bytes"))
	if err := s.Commit(ctx); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("Commit onto a taken key: %v, want ErrExists", err)
	}
	s.Close()
	if got := get(t, l, "xorbs/default/aa01"); got != "hello, world" {
		t.Fatalf("stored object replaced: %q", got)
	}
	if left := putFiles(t, l.Root()); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	if n := createCalls(t, reg); n != 4 {
		t.Fatalf("%d Create calls counted for 4 commits", n)
	}
	if _, err := st.Stage(ctx, "bad//key"); !errors.Is(err, objstore.ErrKey) {
		t.Fatalf("Stage of a malformed key: %v", err)
	}
}

func get(t *testing.T, s objstore.ObjectStore, key string) string {
	t.Helper()
	rc, _, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var b bytes.Buffer
	io.Copy(&b, rc)
	return b.String()
}

// createCalls is the number of Create calls reg counted.
func createCalls(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() != "xet_origin_objstore_call_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "method" && lp.GetValue() == "Create" {
					n += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return n
}
