package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/promtest"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// hookIndex runs onLookup(n) before the n-th XorbSize of xorb h (from 1).
type hookIndex struct {
	index.Index
	h        hash.Hash
	n        int
	onLookup func(n int)
}

func (x *hookIndex) XorbSize(ctx context.Context, h hash.Hash) (uint64, error) {
	if h == x.h {
		x.n++
		x.onLookup(x.n)
	}
	return x.Index.XorbSize(ctx, h)
}

// hookStore runs before (once) when the collector first touches key to take it away — reading
// its copy (hook after the read), deleting it, or moving it — and crashes (panics) on a Create
// of key when crash is set: the collector dying before it puts an object back.
type hookStore struct {
	objstore.ObjectStore
	key    string
	before func()
	crash  bool
}

type crashed struct{}

func (s *hookStore) fire(key string) {
	if key == s.key && s.before != nil {
		f := s.before
		s.before = nil
		f()
	}
}

func (s *hookStore) Get(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	rc, size, err := s.ObjectStore.Get(ctx, key)
	if err != nil || key != s.key {
		return rc, size, err
	}
	body, err := io.ReadAll(rc)
	rc.Close()
	s.fire(key)
	return io.NopCloser(bytes.NewReader(body)), size, err
}

func (s *hookStore) Delete(ctx context.Context, key string) error {
	s.fire(key)
	return s.ObjectStore.Delete(ctx, key)
}

func (s *hookStore) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	if s.crash && key == s.key {
		panic(crashed{})
	}
	return s.ObjectStore.Create(ctx, key, r, size)
}

type mover interface {
	Move(ctx context.Context, from, to string) error
}

// hookMover is a hookStore over a store with a Mover, moving through it.
type hookMover struct{ *hookStore }

func (s hookMover) Move(ctx context.Context, from, to string) error {
	s.fire(from)
	return s.ObjectStore.(mover).Move(ctx, from, to)
}

// hookMatchMover is a hookStore over a store with a MatchMover (S3), moving through it.
type hookMatchMover struct{ *hookStore }

func (s hookMatchMover) MoveMatch(ctx context.Context, from, to, etag string) error {
	s.fire(from)
	return s.ObjectStore.(objstore.MatchMover).MoveMatch(ctx, from, to, etag)
}

// storeFor returns s over objs, with Move or MoveMatch when objs has it.
func storeFor(objs objstore.ObjectStore, s *hookStore) GCObjects {
	s.ObjectStore = objs
	if _, ok := objs.(mover); ok {
		return hookMover{s}
	}
	if _, ok := objs.(objstore.MatchMover); ok {
		return hookMatchMover{s}
	}
	return s
}

func getBody(t *testing.T, objs objstore.ObjectStore, key string) ([]byte, error) {
	t.Helper()
	rc, _, err := objs.Get(t.Context(), key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// runCrashing runs GC and reports whether it crashed (a hookStore panic).
func runCrashing(t *testing.T, ix GCIndex, objs GCObjects, o GCOptions) (crash bool) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(crashed); !ok {
				panic(r)
			}
			crash = true
		}
	}()
	if _, err := GC(t.Context(), ix, objs, o); err != nil {
		t.Fatal(err)
	}
	return false
}

// TestGCOrphanCrashBeforeRestore: an upload indexes an orphan xorb between the collector's last
// look at the index and the object's removal; the collector sees the row and dies before putting
// the object back. The next run puts back the very bytes, and the acknowledged row has its
// object (on main the bytes were only in the dead collector's memory: the row stayed without).
func TestGCOrphanCrashBeforeRestore(t *testing.T) {
	for _, b := range orphanBackends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			ix, objs := b.open(t)
			l := indextest.NewGen(13).Layout(2)
			key := objstore.XorbKey(l.Hash)
			body := []byte("orphan bytes an upload of the same hash found and indexed")
			putObject(t, objs, key, body)
			b.age(t, objs, []string{key})
			hix := &hookIndex{Index: ix, h: l.Hash, onLookup: func(n int) {
				if n == 2 { // the re-check after the object was taken away
					if _, err := ix.PutXorb(ctx, l, uint64(len(body))); err != nil {
						t.Error(err)
					}
				}
			}}
			if !runCrashing(t, hix, storeFor(objs, &hookStore{key: key, crash: true}), GCOptions{Grace: b.grace}) {
				t.Fatal("the collector did not reach the restore")
			}
			if _, err := objs.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("after the crash: %v; want the object missing (readers retry)", err)
			}
			rep, err := GC(ctx, ix, objs, GCOptions{Grace: b.grace})
			if err != nil {
				t.Fatal(err)
			}
			got, err := getBody(t, objs, key)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("indexed xorb's object after the next run: %q, %v; want %q", got, err, body)
			}
			if rep.OrphansRestored != 1 || rep.Orphans != 0 || rep.TrashDeleted != 0 {
				t.Errorf("next run: %+v; want 1 restored", rep)
			}
		})
	}
}

// TestGCOrphanOtherEncoding: a collection examines an orphan xorb (listed, no row) and is about
// to move it to the trash; right before the move (a grace period forced shorter than an upload)
// the key gets another encoding of the xorb with its row — another collection deletes the
// orphan and an upload creates its object, or an upload holding the row puts its bytes over the
// orphan (ingest's ensureStored). The upload's object must be neither deleted nor overwritten.
// On local disk the rename takes the upload's object and puts it back; on MinIO the move is
// bound to the orphan's listed ETag and leaves the key alone. (On main the store without a Mover
// deleted the upload's object and Created its earlier copy of the orphan in its place.)
func TestGCOrphanOtherEncoding(t *testing.T) {
	for _, b := range orphanBackends() {
		for _, replace := range []string{"delete-create", "put"} {
			t.Run(b.name+"/"+replace, func(t *testing.T) {
				ctx := t.Context()
				ix, objs := b.open(t)
				l := indextest.NewGen(14).Layout(2)
				key := objstore.XorbKey(l.Hash)
				enc1, enc2 := []byte("encoding one of the xorb (orphan)"), []byte("encoding two, the indexed one")
				putObject(t, objs, key, enc1)
				b.age(t, objs, []string{key})
				hs := &hookStore{key: key, before: func() {
					if replace == "put" {
						if _, err := ix.PutXorb(ctx, l, uint64(len(enc2))); err != nil {
							t.Error(err)
						}
						putObject(t, objs, key, enc2)
						return
					}
					if err := objs.Delete(ctx, key); err != nil { // the other collection
						t.Error(err)
					}
					if err := objs.Create(ctx, key, bytes.NewReader(enc2), int64(len(enc2))); err != nil { // the upload
						t.Error(err)
					}
					if _, err := ix.PutXorb(ctx, l, uint64(len(enc2))); err != nil {
						t.Error(err)
					}
				}}
				rep, err := GC(ctx, ix, storeFor(objs, hs), GCOptions{Grace: b.grace})
				if err != nil {
					t.Fatal(err)
				}
				if hs.before != nil {
					t.Fatal("the collection did not try to take the orphan away")
				}
				got, err := getBody(t, objs, key)
				if err != nil || !bytes.Equal(got, enc2) {
					t.Fatalf("object of the indexed xorb after gc: %q, %v; want the row's encoding %q", got, err, enc2)
				}
				restored := int64(0)
				if _, ok := objs.(mover); ok {
					restored = 1 // renamed away with the upload's bytes, and put back
				}
				// S3 refuses to move what was written since the listing: left in place, counted.
				if rep.OrphansRestored != restored || rep.OrphansLeft != 1-restored || rep.ObjectsDeleted != 0 || rep.Orphans != 0 {
					t.Errorf("report %+v; want %d restored, %d left in place, none deleted", rep, restored, 1-restored)
				}
				if _, err := objs.Stat(ctx, trashPrefix+key); !errors.Is(err, objstore.ErrNotFound) {
					t.Errorf("trash entry after the collection: %v; want none", err)
				}
			})
		}
	}
}

// TestGCTrash: trash entries a dead run left are settled by the next: one whose key has a row is
// put back, one older than the grace with no row is deleted, a young one with no row is left (a
// concurrent run's); a dry run only reports.
func TestGCTrash(t *testing.T) {
	for _, b := range orphanBackends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			ix, objs := b.open(t)
			g := indextest.NewGen(15)
			l := g.Layout(2)
			indexed, old, young := objstore.XorbKey(l.Hash), objstore.XorbKey(g.Hash()), objstore.ShardKey(g.Hash())
			body, oldBody := []byte("indexed xorb, in the trash"), []byte("orphan in the trash")
			putObject(t, objs, trashPrefix+indexed, body)
			putObject(t, objs, trashPrefix+old, oldBody)
			if _, err := ix.PutXorb(ctx, l, uint64(len(body))); err != nil {
				t.Fatal(err)
			}
			b.age(t, objs, []string{trashPrefix + indexed, trashPrefix + old})
			putObject(t, objs, trashPrefix+young, []byte("young"))
			exists := func(key string) bool {
				_, err := objs.Stat(ctx, key)
				if err != nil && !errors.Is(err, objstore.ErrNotFound) {
					t.Fatal(err)
				}
				return err == nil
			}

			rep, err := GC(ctx, ix, objs, GCOptions{Grace: b.grace, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			if rep.OrphansRestored != 1 || rep.TrashDeleted != 1 || rep.TrashBytes != uint64(len(oldBody)) || rep.ObjectsDeleted != 0 {
				t.Errorf("dry run: %+v; want 1 restored, 1 trash entry of %d bytes deleted, nothing done", rep, len(oldBody))
			}
			if exists(indexed) || !exists(trashPrefix+indexed) || !exists(trashPrefix+old) || !exists(trashPrefix+young) {
				t.Fatal("the dry run changed the store")
			}

			rep, err = GC(ctx, ix, objs, GCOptions{Grace: b.grace})
			if err != nil {
				t.Fatal(err)
			}
			if rep.OrphansRestored != 1 || rep.TrashDeleted != 1 || rep.TrashBytes != uint64(len(oldBody)) ||
				rep.ObjectsDeleted != 1 || rep.BytesReclaimed != uint64(len(oldBody)) {
				t.Errorf("gc: %+v; want 1 restored, 1 trash entry of %d bytes deleted", rep, len(oldBody))
			}
			if got, err := getBody(t, objs, indexed); err != nil || !bytes.Equal(got, body) {
				t.Errorf("restored object: %q, %v; want %q", got, err, body)
			}
			if exists(trashPrefix+indexed) || exists(trashPrefix+old) || exists(old) {
				t.Error("settled trash entries still there")
			}
			if !exists(trashPrefix + young) {
				t.Error("young trash entry deleted")
			}
		})
	}
}

// TestCollectorMetrics: a background run counts what the orphan pass did in the collector's
// series: trash entries deleted and orphans put back (docs/origin.md, "Garbage collection and
// usage").
func TestCollectorMetrics(t *testing.T) {
	b := orphanBackends()[0] // sqlite+local: ages objects at once
	ctx := t.Context()
	ix, objs := b.open(t)
	g := indextest.NewGen(16)
	l := g.Layout(2)
	indexed, old := objstore.XorbKey(l.Hash), objstore.XorbKey(g.Hash())
	body := []byte("indexed xorb, in the trash")
	putObject(t, objs, trashPrefix+indexed, body)
	putObject(t, objs, trashPrefix+old, []byte("orphan in the trash"))
	if _, err := ix.PutXorb(ctx, l, uint64(len(body))); err != nil {
		t.Fatal(err)
	}
	b.age(t, objs, []string{trashPrefix + indexed, trashPrefix + old})

	m := NewMetrics(prometheus.NewRegistry())
	collectOnce(ctx, ix, objs, m, CollectorOptions{Grace: b.grace})
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"runs ok", promtest.Counter(t, m.runs.WithLabelValues("ok")), 1},
		{"orphans restored", promtest.Counter(t, m.orphansRestored), 1},
		{"trash entries deleted", promtest.Counter(t, m.trashDeleted), 1},
		{"objects deleted", promtest.Counter(t, m.deleted), 1},
		{"orphans left", promtest.Counter(t, m.orphansLeft), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v; want %v", c.name, c.got, c.want)
		}
	}
}
