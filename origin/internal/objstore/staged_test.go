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

// TestRemoveTemps: the temporary file of a write a crash interrupted (a staged object never
// committed nor closed, whose writer is gone), older than the cutoff, is counted by a dry run
// and removed by a real one, through the store's decorators; a younger one, committed objects,
// and a write in flight however old its file (it holds the file's lock) stay, and the writes in
// flight still commit.
func TestRemoveTemps(t *testing.T) {
	ctx := context.Background()
	l, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := objstore.NewMetrics(l, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	to, err := objstore.NewTimeouts(m, objstore.TimeoutOptions{Timeout: 30 * time.Second, LocalBodies: true})
	if err != nil {
		t.Fatal(err)
	}
	tr, ok := objstore.TempRemoverOf(to)
	if !ok {
		t.Fatal("TempRemoverOf: no TempRemover under Timeouts and Metrics")
	}
	if _, ok := objstore.TempRemoverOf(struct{ objstore.ObjectStore }{to}); ok {
		t.Error("TempRemoverOf found a remover behind a store that does not unwrap")
	}

	stage := func(key, body string) *objstore.Staged { return stageBody(t, l, key, body) }
	old := time.Now().Add(-2 * time.Hour)
	// What a crashed writer leaves: its file, under a temporary name, held by no one (the
	// file of a staged object, linked to a name of its own before the object is closed).
	st := stage("xorbs/default/aa01", "interrupted write")
	staged := putFiles(t, l.Root())
	if len(staged) != 1 {
		t.Fatalf("temporary files after one stage: %v", staged)
	}
	crashed := filepath.Join(filepath.Dir(staged[0]), ".put-crashed")
	if err := os.Link(staged[0], crashed); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := os.Chtimes(crashed, old, old); err != nil {
		t.Fatal(err)
	}
	inFlight := stage("xorbs/default/bb02", "in flight")
	defer inFlight.Close()
	stalled := stage("xorbs/default/dd04", "stalled") // a body that takes longer than any cutoff
	defer stalled.Close()
	for _, p := range putFiles(t, l.Root()) {
		if p != crashed && strings.Contains(p, "_dd") {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Put(ctx, "xorbs/default/cc03", strings.NewReader("stored"), 6); err != nil {
		t.Fatal(err)
	}

	cutoff := time.Now().Add(-time.Hour)
	n, b, err := tr.RemoveTemps(ctx, cutoff, true)
	if err != nil || n != 1 || b != int64(len("interrupted write")) {
		t.Fatalf("dry run: %d files, %d bytes, %v; want 1 file of %d bytes", n, b, err, len("interrupted write"))
	}
	if got := putFiles(t, l.Root()); len(got) != 3 {
		t.Fatalf("after the dry run: %v, want all three temporary files", got)
	}
	n, b, err = tr.RemoveTemps(ctx, cutoff, false)
	if err != nil || n != 1 || b != int64(len("interrupted write")) {
		t.Fatalf("real run: %d files, %d bytes, %v; want 1 file of %d bytes", n, b, err, len("interrupted write"))
	}
	if got := putFiles(t, l.Root()); len(got) != 2 || got[0] == crashed || got[1] == crashed {
		t.Fatalf("after the real run: %v, want only the writes in flight's", got)
	}
	if _, err := stalled.Write([]byte(" and more")); err != nil {
		t.Fatal(err)
	}
	for _, w := range []*objstore.Staged{inFlight, stalled} {
		if err := w.Commit(ctx); err != nil {
			t.Fatalf("a write in flight after the sweep: %v", err)
		}
	}
	for _, k := range []string{"xorbs/default/bb02", "xorbs/default/cc03", "xorbs/default/dd04"} {
		if _, err := l.Stat(ctx, k); err != nil {
			t.Errorf("%s after the sweep: %v", k, err)
		}
	}
	if n, _, err := tr.RemoveTemps(ctx, cutoff, false); err != nil || n != 0 {
		t.Errorf("second run: %d files, %v; want none", n, err)
	}
	// Closed, the committed writes leave no temporary file, and their objects stay.
	inFlight.Close()
	stalled.Close()
	if got := putFiles(t, l.Root()); len(got) != 0 {
		t.Errorf("after the writes closed: %v", got)
	}
	if rc, _, err := l.Get(ctx, "xorbs/default/dd04"); err != nil {
		t.Error(err)
	} else {
		got, _ := io.ReadAll(rc)
		rc.Close()
		if string(got) != "stalled and more" {
			t.Errorf("stalled write stored %q", got)
		}
	}
}

// TestStagedTempRemoved: a write whose temporary file something removed behind its back (an
// operator; a collector where there is no flock) fails with ErrUnavailable, for its client to
// retry, and not with ErrNotFound (the origin's 404 for a missing object); nothing is stored.
func TestStagedTempRemoved(t *testing.T) {
	ctx := context.Background()
	l, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := stageBody(t, l, "xorbs/default/ee05", "body")
	defer st.Close()
	tmp := putFiles(t, l.Root())
	if len(tmp) != 1 {
		t.Fatalf("temporary files: %v", tmp)
	}
	if err := os.Remove(tmp[0]); err != nil {
		t.Fatal(err)
	}
	err = st.Commit(ctx)
	if !errors.Is(err, objstore.ErrUnavailable) || errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Commit after its temporary file was removed: %v; want ErrUnavailable, not ErrNotFound", err)
	}
	if _, err := l.Stat(ctx, "xorbs/default/ee05"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Stat after the failed commit: %v; want ErrNotFound", err)
	}
}

// TestStagedReplace: Replace renames a staged object over its key, replacing an object there
// (ingest puts back the encoding its index row describes), whether or not a Commit found the
// key taken or linked the same file there first; no temporary name is left, before or after
// Close, and a Commit after it fails.
func TestStagedReplace(t *testing.T) {
	ctx := context.Background()
	l, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	get := func(key string) string {
		t.Helper()
		rc, _, err := l.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return string(b)
	}
	stage := func(key, body string) *objstore.Staged { return stageBody(t, l, key, body) }
	// Over another object, after a Commit that found the key taken.
	const key = "xorbs/default/aa01"
	if err := l.Create(ctx, key, strings.NewReader("other encoding"), 14); err != nil {
		t.Fatal(err)
	}
	st := stage(key, "row's encoding")
	if err := st.Commit(ctx); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("Commit onto a taken key: %v", err)
	}
	if err := st.Replace(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(key); got != "row's encoding" {
		t.Fatalf("after Replace: %q", got)
	}
	if got := putFiles(t, l.Root()); len(got) != 0 {
		t.Fatalf("temporary files after Replace: %v", got)
	}
	if err := st.Commit(ctx); err == nil {
		t.Error("Commit after Replace succeeded")
	}
	st.Close()
	// Over its own committed file (two names of one file: the rename does nothing).
	const key2 = "xorbs/default/bb02"
	st = stage(key2, "own")
	if err := st.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Replace(ctx); err != nil {
		t.Fatal(err)
	}
	if got := putFiles(t, l.Root()); len(got) != 0 {
		t.Fatalf("temporary files after Replace over its own link: %v", got)
	}
	st.Close()
	if got := get(key2); got != "own" {
		t.Fatalf("after Replace over its own link and Close: %q", got)
	}
}

// stageBody stages an object of key on l and writes body to it, neither committed nor closed.
func stageBody(t *testing.T, l *objstore.Local, key, body string) *objstore.Staged {
	t.Helper()
	st, err := l.Stage(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte(body)); err != nil {
		t.Fatal(err)
	}
	return st
}
