package ingest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"slices"
	"sync"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// tempFiles lists the ".put-*" files of the local store st: what an upload left behind.
func tempFiles(t *testing.T, st objstore.ObjectStore) []string {
	t.Helper()
	var out []string
	if err := st.(*objstore.Local).TempFiles(t.Context(), func(p string, _ fs.FileInfo) error { out = append(out, p); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPutXorbStreamEncodingRace is TestPutXorbEncodingRace for streamed uploads, mixed with
// buffered ones: one xorb in every encoding a client may choose, at once, through two Services
// sharing an index and a local store. All succeed, the index describes the stored object, and
// no temporary file stays.
func TestPutXorbStreamEncodingRace(t *testing.T) {
	svc, db, st := newService(t)
	if !svc.Streams() {
		t.Fatal("a Service on the local store does not stream")
	}
	replica := New(Options{Index: db, Objects: st})
	raceStreamedAndBuffered(t, svc, replica, db, st, 20, nil)
	if left := tempFiles(t, st); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// TestPutXorbStreamRejectsLeaveNoTrace: a streamed upload that is invalid, truncated, of
// another hash or cut off by its reader stores nothing, indexes nothing and leaves no
// temporary file; a body whose reader fails is a *xorb.ReadError.
func TestPutXorbStreamRejectsLeaveNoTrace(t *testing.T) {
	svc, db, st := newService(t)
	ctx := context.Background()
	_, bodies, h := sameChunks(t, 100, 40)
	_, others, _ := sameChunks(t, 101, 3)
	body := bodies[1] // LZ4
	flipped := slices.Clone(body)
	flipped[len(body)/2] ^= 0x55
	boom := errors.New("connection reset")
	for _, tc := range []struct {
		name string
		r    func() *failReader
	}{
		{"truncated", func() *failReader { return &failReader{b: body[:len(body)-5]} }},
		{"flipped byte", func() *failReader { return &failReader{b: flipped} }},
		{"trailing bytes", func() *failReader { return &failReader{b: append(slices.Clone(body), 0, 0, 0)} }},
		{"other xorb", func() *failReader { return &failReader{b: others[0]} }},
		{"reader fails", func() *failReader { return &failReader{b: body[:len(body)-100], err: boom} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := svc.PutXorbStream(ctx, "models/acme/x", Prefix, h, tc.r(), nil)
			if err == nil {
				t.Fatal("accepted")
			}
			var re *xorb.ReadError
			if tc.name == "reader fails" && (!errors.As(err, &re) || !errors.Is(err, boom)) {
				t.Fatalf("failed reader: %v; want a *xorb.ReadError", err)
			}
			if _, err := db.XorbSize(ctx, h); !errors.Is(err, index.ErrNotFound) {
				t.Fatalf("indexed after a rejected upload: %v", err)
			}
			if _, err := st.Stat(ctx, XorbKey(h)); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("object after a rejected upload: %v", err)
			}
			if left := tempFiles(t, st); len(left) > 0 {
				t.Fatalf("temporary files left: %v", left)
			}
		})
	}
	// And the same xorb then goes in.
	if ins, err := svc.PutXorbStream(ctx, "models/acme/x", Prefix, h, bytes.NewReader(body), nil); err != nil || !ins {
		t.Fatalf("valid upload after the rejects: inserted %v, %v", ins, err)
	}
	if left := tempFiles(t, st); len(left) > 0 {
		t.Fatalf("temporary files left after a stored upload: %v", left)
	}
}

// TestPutXorbStreamRestoresCollected: garbage collection deleted the object between the
// streamed upload's store and its index insert (simulated by deleting it when the index is
// asked to insert): the upload puts its own bytes back, durable, before it answers.
func TestPutXorbStreamRestoresCollected(t *testing.T) {
	svc, db, st := newService(t)
	ctx := context.Background()
	chunks, bodies, h := sameChunks(t, 102, 8)
	svc.idx = deleteBeforePut{Index: db, st: st.(*objstore.Local)}
	ins, err := svc.PutXorbStream(ctx, "models/acme/x", Prefix, h, bytes.NewReader(bodies[2]), nil)
	if err != nil || !ins {
		t.Fatalf("upload: inserted %v, %v", ins, err)
	}
	checkServable(t, db, st, h, chunks)
	if left := tempFiles(t, st); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// deleteBeforePut deletes the xorb's object just before the index inserts its row.
type deleteBeforePut struct {
	index.Index
	st *objstore.Local
}

func (d deleteBeforePut) PutXorb(ctx context.Context, l *xorb.Layout, size uint64) (bool, error) {
	if err := d.st.Delete(ctx, XorbKey(l.Hash)); err != nil {
		return false, err
	}
	return d.Index.PutXorb(ctx, l, size)
}

// failReader reads b, then fails with err (io.EOF when err is nil), in small pieces.
type failReader struct {
	b   []byte
	err error
}

func (f *failReader) Read(p []byte) (int, error) {
	if len(f.b) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 3000)], f.b)
	f.b = f.b[n:]
	return n, nil
}

// raceStreamedAndBuffered uploads one xorb per round in every encoding a client may choose, each
// encoding both streamed (with mem) and buffered, all at once, alternating between svc and
// replica (two Services sharing db and st); every upload must succeed and the xorb be servable.
func raceStreamedAndBuffered(t *testing.T, svc, replica *Service, db index.Index, st Objects, rounds int, mem Memory) {
	t.Helper()
	ctx := t.Context()
	for round := range rounds {
		chunks, bodies, h := sameChunks(t, uint64(round), 6)
		var wg sync.WaitGroup
		errs := make([]error, 2*len(bodies))
		for i := range errs {
			s := svc
			if (round+i)%2 == 1 {
				s = replica
			}
			body := bodies[i%len(bodies)]
			if i < len(bodies) {
				wg.Go(func() { _, errs[i] = s.PutXorbStream(ctx, "models/acme/race", Prefix, h, bytes.NewReader(body), mem) })
			} else {
				wg.Go(func() { _, errs[i] = s.PutXorb(ctx, "models/acme/race", Prefix, h, body) })
			}
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: upload %d (%v): %v", round, i, encodings[i%len(encodings)], err)
			}
		}
		checkServable(t, db, st, h, chunks)
	}
}
