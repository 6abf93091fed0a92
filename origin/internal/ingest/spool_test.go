package ingest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/sqlite"
	"github.com/xetcdn/xetcdn/origin/internal/objstore"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// TestSpool: a spool returns exactly what was written, through Read and through WriteTo, across
// segment boundaries; it reserves one segment at a time, before it uses it; a failed
// reservation fails the write with its error; a write past its max is refused.
func TestSpool(t *testing.T) {
	data := make([]byte, 3*spoolSegment+12345)
	rand.Read(data)
	var reserved int64
	sp := &spool{max: int64(len(data)), mem: func(n int64) error { reserved += n; return nil }}
	defer sp.free()
	for rest, i := data, 0; len(rest) > 0; i++ {
		n := min(len(rest), []int{1, 4095, spoolSegment - 4096, 3 * spoolSegment, 7}[i%5])
		if m, err := sp.Write(rest[:n]); err != nil || m != n {
			t.Fatalf("write %d of %d bytes: %d, %v", i, n, m, err)
		}
		if need := (sp.Len() + spoolSegment - 1) / spoolSegment * spoolSegment; reserved != need {
			t.Fatalf("after %d bytes %d reserved, want %d (one segment at a time)", sp.Len(), reserved, need)
		}
		rest = rest[n:]
	}
	if _, err := sp.Write([]byte{0}); !errors.Is(err, errSpoolFull) {
		t.Fatalf("write past max: %v", err)
	}
	var viaRead bytes.Buffer
	small := make([]byte, 1000)
	for r := sp.reader(); ; {
		n, err := r.Read(small)
		viaRead.Write(small[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var viaWriteTo bytes.Buffer
	if n, err := sp.reader().WriteTo(&viaWriteTo); err != nil || n != int64(len(data)) {
		t.Fatalf("WriteTo: %d, %v", n, err)
	}
	if !bytes.Equal(viaRead.Bytes(), data) || !bytes.Equal(viaWriteTo.Bytes(), data) {
		t.Fatal("the spool does not read back what was written")
	}
	// A reader still held when the upload ends (an HTTP transport's goroutine) cannot reach
	// the freed segments.
	late := sp.reader()
	sp.free()
	if n, err := late.Read(small); n != 0 || !errors.Is(err, errSpoolFreed) {
		t.Fatalf("Read after free: %d, %v", n, err)
	}
	if n, err := late.WriteTo(io.Discard); n != 0 || !errors.Is(err, errSpoolFreed) {
		t.Fatalf("WriteTo after free: %d, %v", n, err)
	}

	busy := errors.New("busy")
	left := 2
	sp2 := &spool{max: spoolMax, mem: func(int64) error {
		if left == 0 {
			return busy
		}
		left--
		return nil
	}}
	defer sp2.free()
	if _, err := sp2.Write(data); !errors.Is(err, busy) {
		t.Fatalf("write beyond the reservations granted: %v", err)
	}
}

// wholeObjects hides the local store's Stager: a store that takes whole objects only, as S3.
type wholeObjects struct{ Objects }

// spoolStores are the stores that take whole objects, each with a body held in one mapping
// (flat.go, where the platform maps) and in segments (spool.go): the local store behind
// wholeObjects, and MinIO when the test services are configured.
func spoolStores(t *testing.T) map[string]func(t *testing.T) Objects {
	out := map[string]func(t *testing.T) Objects{}
	for name, open := range wholeStores() {
		for _, flat := range []bool{true, false} {
			mode := "segments"
			if flat {
				mode = "flat"
			}
			out[name+"/"+mode] = func(t *testing.T) Objects {
				flatBodies = flat
				t.Cleanup(func() { flatBodies = true })
				return open(t)
			}
		}
	}
	return out
}

func wholeStores() map[string]func(t *testing.T) Objects {
	return map[string]func(t *testing.T) Objects{
		"local-whole": func(t *testing.T) Objects {
			st, err := objstore.NewLocal(filepath.Join(t.TempDir(), "o"))
			if err != nil {
				t.Fatal(err)
			}
			return wholeObjects{st}
		},
		"s3": newS3Objects,
	}
}

// newS3Objects opens a store on a fresh bucket of the test MinIO, removed when the test ends.
func newS3Objects(t *testing.T) Objects {
	env := testenv.RequireS3(t)
	var suffix [8]byte
	rand.Read(suffix[:])
	bucket := "xet-test-spool-" + hex.EncodeToString(suffix[:])
	s, err := objstore.NewS3(t.Context(), objstore.S3Options{Endpoint: env.Endpoint, AccessKey: env.AccessKey, SecretKey: env.SecretKey, Bucket: bucket})
	if err != nil {
		t.Fatalf("NewS3: %v", err)
	}
	t.Cleanup(func() {
		c, err := minio.New(env.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(env.AccessKey, env.SecretKey, "")})
		if err == nil {
			err = c.RemoveBucketWithOptions(context.Background(), bucket, minio.RemoveBucketOptions{ForceDelete: true})
		}
		if err != nil {
			t.Errorf("cleanup bucket %s: %v", bucket, err)
		}
	})
	return s
}

func newSpoolService(t *testing.T, st Objects) (*Service, index.Index) {
	db, err := sqlite.Open(t.Context(), sqlite.Options{Path: filepath.Join(t.TempDir(), "i.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	svc := New(Options{Index: db, Objects: st})
	if svc.Streams() {
		t.Fatal("the store takes streamed objects")
	}
	return svc, db
}

// meter is a Memory that counts what it granted and refuses past a ceiling.
type meter struct {
	mu       sync.Mutex
	granted  int64
	ceiling  int64 // 0: none
	refusals int
}

var errNoMemory = errors.New("no ingest memory")

func (m *meter) reserve(n int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ceiling > 0 && m.granted+n > m.ceiling {
		m.refusals++
		return errNoMemory
	}
	m.granted += n
	return nil
}

// TestPutXorbSpooled: on a store that takes whole objects (S3), PutXorbStream stores a valid
// xorb whole (the index describes the stored object), reserving memory one segment at a time
// as the object grows, never more than a segment beyond it; and bodies that are invalid,
// truncated, over-long, of another hash, cut off by their reader, or that run out of memory
// store nothing and index nothing.
func TestPutXorbSpooled(t *testing.T) {
	for name, open := range spoolStores(t) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			svc, db := newSpoolService(t, st)
			ctx := t.Context()
			chunks, bodies, h := sameChunks(t, 200, 1000) // ~5 MB raw: several segments
			_, others, _ := sameChunks(t, 201, 3)
			body := bodies[0] // uncompressed: the largest
			flipped := slices.Clone(body)
			flipped[len(body)/2] ^= 0x55
			boom := errors.New("connection reset")
			for _, tc := range []struct {
				name    string
				r       *failReader
				ceiling int64
				want    error
			}{
				{"truncated", &failReader{b: body[:len(body)-5]}, 0, xorb.ErrCorrupt},
				{"flipped byte", &failReader{b: flipped}, 0, nil},
				{"trailing bytes", &failReader{b: append(slices.Clone(body), 0, 0, 0)}, 0, nil},
				{"other xorb", &failReader{b: others[0]}, 0, xorb.ErrHashMismatch},
				{"reader fails", &failReader{b: body[:len(body)-100], err: boom}, 0, boom},
				{"memory runs out", &failReader{b: body}, spoolSegment, errNoMemory},
			} {
				t.Run(tc.name, func(t *testing.T) {
					m := &meter{ceiling: tc.ceiling}
					_, err := svc.PutXorbStream(ctx, "models/acme/x", Prefix, h, tc.r, m.reserve)
					if err == nil {
						t.Fatal("accepted")
					}
					if tc.want != nil && !errors.Is(err, tc.want) {
						t.Fatalf("err = %v, want %v", err, tc.want)
					}
					if tc.ceiling > 0 && m.refusals == 0 {
						t.Fatal("the memory ceiling was never met")
					}
					if _, err := db.XorbSize(ctx, h); !errors.Is(err, index.ErrNotFound) {
						t.Fatalf("indexed after a rejected upload: %v", err)
					}
					if _, err := st.Stat(ctx, XorbKey(h)); !errors.Is(err, objstore.ErrNotFound) {
						t.Fatalf("object after a rejected upload: %v", err)
					}
				})
			}
			m := &meter{}
			if ins, err := svc.PutXorbStream(ctx, "models/acme/x", Prefix, h, &failReader{b: body}, m.reserve); err != nil || !ins {
				t.Fatalf("valid upload after the rejects: inserted %v, %v", ins, err)
			}
			checkServable(t, db, st, h, chunks)
			size, err := db.XorbSize(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			if m.granted < int64(size) || m.granted >= int64(size)+spoolSegment {
				t.Fatalf("reserved %d bytes for a stored object of %d; want it within one segment (%d) above", m.granted, size, spoolSegment)
			}
			// Known now: validated, not stored again, nothing reserved.
			m = &meter{}
			if ins, err := svc.PutXorbStream(ctx, "models/acme/y", Prefix, h, bytes.NewReader(bodies[1]), m.reserve); err != nil || ins || m.granted != 0 {
				t.Fatalf("upload of a known xorb: inserted %v, %v, %d bytes reserved", ins, err, m.granted)
			}
		})
	}
}

// TestPutXorbSpooledEncodingRace is TestPutXorbStreamEncodingRace on a store that takes whole
// objects: one xorb in every encoding, spooled and buffered uploads at once, through two
// Services sharing an index and the store. All succeed and the index describes the stored
// object, whichever won.
func TestPutXorbSpooledEncodingRace(t *testing.T) {
	for name, open := range spoolStores(t) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			svc, db := newSpoolService(t, st)
			replica := New(Options{Index: db, Objects: st})
			raceStreamedAndBuffered(t, svc, replica, db, st, 8, (&meter{}).reserve)
		})
	}
}

// TestFlat: a flat body's reads land in its mapping one after another, each limited to what is
// reserved and reserving one segment at a time before a read may touch it; a read into other
// memory (the upload's own footer) passes through uncounted; a failed reservation fails the
// read and is kept; a reader of the object cannot reach it once freed.
func TestFlat(t *testing.T) {
	b, err := newFlat(flatLen)
	if errors.Is(err, errNoFlat) {
		t.Skip("no flat bodies on this platform")
	}
	if err != nil {
		t.Fatal(err)
	}
	m := &meter{ceiling: 3 * spoolSegment}
	f := &flat{b: b, mem: m.reserve}
	defer f.free()
	data := make([]byte, 3*spoolSegment+100)
	rand.Read(data)
	fr := flatReader{f, bytes.NewReader(data)}
	for f.n < 3*spoolSegment {
		n, err := fr.Read(f.b[f.n:])
		if err != nil {
			t.Fatalf("read at %d: %v", f.n, err)
		}
		if need := (f.n + spoolSegment - 1) / spoolSegment * spoolSegment; m.granted != need || n == 0 {
			t.Fatalf("after %d bytes (read %d) %d reserved, want %d", f.n, n, m.granted, need)
		}
	}
	if _, err := fr.Read(f.b[f.n:]); !errors.Is(err, errNoMemory) || !errors.Is(f.memErr, errNoMemory) {
		t.Fatalf("read past the ceiling: %v (kept %v)", err, f.memErr)
	}
	other := make([]byte, 50)
	if n, err := fr.Read(other); err != nil || n != 50 || f.n != 3*spoolSegment {
		t.Fatalf("read into other memory: %d, %v, n %d", n, err, f.n)
	}
	if !bytes.Equal(f.b[:f.n], data[:f.n]) {
		t.Fatal("the mapping does not hold what was read")
	}
	f.size = f.n
	obj := f.reader()
	head := make([]byte, 10)
	if _, err := obj.Read(head); err != nil || !bytes.Equal(head, data[:10]) {
		t.Fatalf("object read: %v", err)
	}
	f.free()
	if n, err := obj.Read(head); n != 0 || !errors.Is(err, errSpoolFreed) {
		t.Fatalf("object read after free: %d, %v", n, err)
	}
}
