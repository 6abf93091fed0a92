// Package readpathtest is the conformance suite of readpath.Source: every implementation (the
// origin's over SQLite + local disk and over Postgres + MinIO, the edge's layer stack with a
// real origin behind it) must pass Run, and so must the shared handlers over it.
package readpathtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/httpserver"
	"github.com/xetcdn/xetcdn/shared/readpath"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Fixture is a Source holding one file, File, visible in Scope and in no other scope.
type Fixture struct {
	Source readpath.Source
	Scope  string
	File   hash.Hash
	// Size is the file's size; Xorbs the serialized chunks of its xorbs (each xorb's chunk
	// area, as a client uploads it: the stored object is this, the footer and its length).
	Size  uint64
	Xorbs map[hash.Hash][]byte
	// Hide hides File in Scope and returns once the Source must see it hidden (nil: the
	// Hide checks are skipped). It is called last.
	Hide func(t *testing.T)
}

// otherScope is a scope no fixture's file is visible in.
const otherScope = "readpathtest/other"

// Run checks f.Source against the readpath.Source contract and the shared handlers over it.
func Run(t *testing.T, f *Fixture) {
	t.Run("File", func(t *testing.T) { testFile(t, f) })
	t.Run("NotVisible", func(t *testing.T) { testNotVisible(t, f) })
	t.Run("Layouts", func(t *testing.T) { testLayouts(t, f) })
	t.Run("Ranges", func(t *testing.T) { testRanges(t, f) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, f) })
	t.Run("Handlers", func(t *testing.T) { testHandlers(t, f) })
	if f.Hide != nil {
		t.Run("Hide", func(t *testing.T) { testHide(t, f) })
	}
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testFile(t *testing.T, f *Fixture) {
	rec, err := f.Source.File(ctxOf(t), f.File, f.Scope)
	if err != nil {
		t.Fatalf("File(%s, %q): %v", f.File, f.Scope, err)
	}
	if rec.Hash != f.File || rec.Size != f.Size {
		t.Fatalf("File = record of %s, %d bytes; want %s, %d bytes", rec.Hash, rec.Size, f.File, f.Size)
	}
	var sum uint64
	for i, tm := range rec.Terms {
		if _, ok := f.Xorbs[tm.Xorb]; !ok {
			t.Fatalf("term %d names xorb %s, not one of the file's", i, tm.Xorb)
		}
		sum += uint64(tm.RawBytes)
	}
	if sum != f.Size || len(rec.Terms) == 0 {
		t.Fatalf("%d terms of %d bytes in all; want the file's %d bytes", len(rec.Terms), sum, f.Size)
	}
	again, err := f.Source.File(ctxOf(t), f.File, f.Scope)
	if err != nil || again.Hash != rec.Hash || len(again.Terms) != len(rec.Terms) {
		t.Fatalf("second File = %v, %v; want the same record", again, err)
	}
	if err := f.Source.Visible(ctxOf(t), f.File, f.Scope); err != nil {
		t.Fatalf("Visible(%s, %q): %v", f.File, f.Scope, err)
	}
}

func testNotVisible(t *testing.T, f *Fixture) {
	unknown := hash.Chunk([]byte("readpathtest: a file nobody registered"))
	for _, c := range []struct {
		name  string
		file  hash.Hash
		scope string
	}{{"other scope", f.File, otherScope}, {"unknown file", unknown, f.Scope}} {
		if rec, err := f.Source.File(ctxOf(t), c.file, c.scope); !errors.Is(err, readpath.ErrNotFound) {
			t.Errorf("%s: File = %v, %v; want readpath.ErrNotFound", c.name, rec, err)
		}
		if err := f.Source.Visible(ctxOf(t), c.file, c.scope); !errors.Is(err, readpath.ErrNotFound) {
			t.Errorf("%s: Visible = %v; want readpath.ErrNotFound", c.name, err)
		}
	}
}

func testLayouts(t *testing.T, f *Fixture) {
	for x, obj := range f.Xorbs {
		l, err := f.Source.Layout(ctxOf(t), x)
		if err != nil {
			t.Fatalf("Layout(%s): %v", x, err)
		}
		if l.Hash != x || l.NumChunks() == 0 || uint64(l.ChunkAreaLen()) != uint64(len(obj)) {
			t.Fatalf("Layout(%s) = layout of %s, %d chunks in %d bytes; chunk area is %d bytes",
				x, l.Hash, l.NumChunks(), l.ChunkAreaLen(), len(obj))
		}
	}
}

// ranges are byte ranges of the chunk area of a xorb with layout boundaries ends: whole,
// chunk-aligned, unaligned, single bytes.
func ranges(ends []uint32) []httprange.ByteRange {
	area := uint64(ends[len(ends)-1])
	rs := []httprange.ByteRange{{Start: 0, End: area - 1}, {Start: 0, End: 0}, {Start: area - 1, End: area - 1}}
	if len(ends) > 2 {
		rs = append(rs, httprange.ByteRange{Start: uint64(ends[0]), End: uint64(ends[1]) - 1}) // chunk 1
		rs = append(rs, httprange.ByteRange{Start: uint64(ends[0]) + 3, End: uint64(ends[2]) - 5})
	}
	return append(rs, httprange.ByteRange{Start: 1, End: area / 2})
}

func testRanges(t *testing.T, f *Fixture) {
	for x, obj := range f.Xorbs {
		xo, err := f.Source.Xorb(ctxOf(t), x)
		if err != nil {
			t.Fatalf("Xorb(%s): %v", x, err)
		}
		l, err := f.Source.Layout(ctxOf(t), x)
		if err != nil {
			t.Fatal(err)
		}
		if want := uint64(len(obj)) + uint64(xorb.FooterLen(l.NumChunks())) + 4; xo.Size() != want {
			t.Fatalf("Xorb(%s).Size() = %d, want %d (chunks, footer, footer length)", x, xo.Size(), want)
		}
		for _, b := range ranges(l.StoredEnds) {
			for _, buf := range [][]byte{nil, make([]byte, 4096)} {
				got := read(t, xo, b, buf)
				if !bytes.Equal(got, obj[b.Start:b.End+1]) {
					t.Fatalf("Xorb(%s).Open(%s) (copy buffer %d) sent %d bytes that differ from the object's %d",
						x, b, len(buf), len(got), b.Len())
				}
			}
		}
	}
}

// read opens b of x and sends it through buf.
func read(t *testing.T, x readpath.Xorb, b httprange.ByteRange, buf []byte) []byte {
	t.Helper()
	p, err := x.Open(ctxOf(t), b)
	if err != nil {
		t.Fatalf("Open(%s): %v", b, err)
	}
	var out bytes.Buffer
	n, err := p.Send(&out, buf)
	if err != nil || n != int64(out.Len()) {
		t.Fatalf("Send(%s) = %d, %v; wrote %d", b, n, err, out.Len())
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	return out.Bytes()
}

func testConcurrent(t *testing.T, f *Fixture) {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 8 {
		wg.Go(func() {
			ctx := ctxOf(t)
			rec, err := f.Source.File(ctx, f.File, f.Scope)
			if err != nil {
				errs <- fmt.Errorf("goroutine %d: File: %w", i, err)
				return
			}
			tm := rec.Terms[i%len(rec.Terms)]
			xo, err := f.Source.Xorb(ctx, tm.Xorb)
			if err != nil {
				errs <- fmt.Errorf("goroutine %d: Xorb: %w", i, err)
				return
			}
			b := httprange.ByteRange{Start: uint64(tm.ByteStart), End: uint64(tm.ByteEnd) - 1}
			p, err := xo.Open(ctx, b)
			if err != nil {
				errs <- fmt.Errorf("goroutine %d: Open: %w", i, err)
				return
			}
			defer p.Close()
			var out bytes.Buffer
			if _, err := p.Send(&out, nil); err != nil {
				errs <- fmt.Errorf("goroutine %d: Send: %w", i, err)
				return
			}
			if obj := f.Xorbs[tm.Xorb]; !bytes.Equal(out.Bytes(), obj[b.Start:b.End+1]) {
				errs <- fmt.Errorf("goroutine %d: term %s of %s: wrong bytes", i, b, tm.Xorb)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// testHandlers runs the shared handlers over the Source: a v2 answer's every fetch URL,
// fetched from the transfer route range by range and all ranges at once, gives the object's
// bytes; HEAD gives the size; another scope is a readpath.ErrNotFound error.
func testHandlers(t *testing.T, f *Fixture) {
	signer, err := urlsign.New(urlsign.Options{BaseURL: "http://readpathtest.invalid", Key: bytes.Repeat([]byte("k"), urlsign.MinKeyLen)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := readpath.New(readpath.Options{Source: f.Source, Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	get := func(handler httpserver.Handler, method, url, scope string, hdr ...string) (*httptest.ResponseRecorder, error) {
		r := httptest.NewRequestWithContext(httpserver.WithClaims(ctxOf(t), &auth.Claims{Scope: scope, Access: auth.Read}), method, url, nil)
		r.SetPathValue("file", f.File.String())
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		return w, handler(w, r)
	}
	w, err := get(h.ReconV2, "GET", "/v2/reconstructions/"+f.File.String(), f.Scope)
	if err != nil || w.Code != 200 {
		t.Fatalf("v2 reconstruction: %d, %v", w.Code, err)
	}
	var a wire.QueryReconstructionResponseV2
	if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
		t.Fatalf("v2 answer: %v", err)
	}
	for x, fetches := range a.Xorbs {
		obj := f.Xorbs[x]
		for _, mf := range fetches {
			var all []string
			for _, rd := range mf.Ranges {
				spec := fmt.Sprintf("%d-%d", rd.Bytes.Start, rd.Bytes.End)
				all = append(all, spec)
				w, err := get(h.Transfer, "GET", mf.URL, "", "Range", "bytes="+spec)
				if err != nil || w.Code != http.StatusPartialContent {
					t.Fatalf("transfer %s: %d, %v", spec, w.Code, err)
				}
				if !bytes.Equal(w.Body.Bytes(), obj[rd.Bytes.Start:rd.Bytes.End+1]) {
					t.Fatalf("transfer %s of %s: wrong bytes", spec, x)
				}
			}
			if len(all) > 1 {
				checkMultipart(t, get, h, mf, obj)
			}
		}
	}
	w, err = get(h.HeadFile, "HEAD", "/v1/files/"+f.File.String(), f.Scope)
	if err != nil || w.Header().Get("Content-Length") != strconv.FormatUint(f.Size, 10) {
		t.Fatalf("HEAD: %v, Content-Length %q; want %d", err, w.Header().Get("Content-Length"), f.Size)
	}
	if _, err := get(h.ReconV1, "GET", "/v1/reconstructions/"+f.File.String(), otherScope); !errors.Is(err, readpath.ErrNotFound) {
		t.Fatalf("v1 reconstruction in another scope: %v, want readpath.ErrNotFound", err)
	}
}

// checkMultipart fetches all of mf's ranges in one request and checks each part.
func checkMultipart(t *testing.T, get func(httpserver.Handler, string, string, string, ...string) (*httptest.ResponseRecorder, error),
	h *readpath.Handlers, mf wire.MultiRangeFetch, obj []byte) {
	t.Helper()
	spec := "bytes="
	for i, rd := range mf.Ranges {
		if i > 0 {
			spec += ","
		}
		spec += fmt.Sprintf("%d-%d", rd.Bytes.Start, rd.Bytes.End)
	}
	w, err := get(h.Transfer, "GET", mf.URL, "", "Range", spec)
	if err != nil || w.Code != http.StatusPartialContent {
		t.Fatalf("transfer %s: %d, %v", spec, w.Code, err)
	}
	_, params, err := mime.ParseMediaType(w.Header().Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	mr := multipart.NewReader(w.Body, params["boundary"])
	for i := 0; ; i++ {
		p, err := mr.NextPart()
		if err == io.EOF {
			if i == 0 {
				t.Fatalf("multipart answer to %s has no part", spec)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		var br httprange.ByteRange
		var size uint64
		if _, err := fmt.Sscanf(p.Header.Get("Content-Range"), "bytes %d-%d/%d", &br.Start, &br.End, &size); err != nil ||
			br.End >= uint64(len(obj)) {
			t.Fatalf("part %d: Content-Range %q (%v)", i, p.Header.Get("Content-Range"), err)
		}
		got, _ := io.ReadAll(p)
		if !bytes.Equal(got, obj[br.Start:br.End+1]) {
			t.Fatalf("part %d (%s): wrong bytes", i, br)
		}
	}
}

func testHide(t *testing.T, f *Fixture) {
	f.Hide(t)
	if rec, err := f.Source.File(ctxOf(t), f.File, f.Scope); !errors.Is(err, readpath.ErrNotFound) {
		t.Errorf("File after Hide = %v, %v; want readpath.ErrNotFound", rec, err)
	}
	if err := f.Source.Visible(ctxOf(t), f.File, f.Scope); !errors.Is(err, readpath.ErrNotFound) {
		t.Errorf("Visible after Hide = %v; want readpath.ErrNotFound", err)
	}
}
