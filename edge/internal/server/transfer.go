package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/xetcdn/xetcdn/edge/internal/datacache"
	"github.com/xetcdn/xetcdn/edge/internal/originapi"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// objectSize is the size of the stored xorb object l describes: chunk area, v1 footer and its
// u32 length (what the origin stores and Content-Range totals name).
func objectSize(l *xorb.Layout) uint64 {
	return uint64(l.ChunkAreaLen()) + uint64(xorb.FooterLen(l.NumChunks())) + 4
}

// transfer: GET /v1/transfer/xorbs/default/{hash}?f=…&c=…&r=…&x=…&s=… — the edge's signed
// transfer route. The URL is the credential, good only while the file it was issued for is
// visible in its scope (403 when hidden — as soon as the edge has applied the origin's event —
// tampered, expired, or when a requested range leaves the signed set). Overlapping or adjacent
// ranges are coalesced, and more parts than the URL has signed ranges (and than
// urlsign.MinParts) is 416 (urlsign.Parts): one URL never answers more than its signed span. One part → 206 with exactly those bytes;
// several → 206 multipart/byteranges, one part per (coalesced) range in request order; no
// Range header → the signed ranges. Every byte comes from XorbBytes, which verified it against
// the layout; bytes that fail verification are never sent (502).
func (s *Server) transfer(w http.ResponseWriter, r *http.Request) error {
	g, err := s.o.Signer.VerifyRequest(r, s.o.Now())
	if err != nil {
		return err
	}
	ctx := r.Context()
	if err := s.o.Meta.Visible(ctx, g.File, g.Scope); err != nil {
		if errors.Is(err, originapi.ErrNotFound) {
			return fmt.Errorf("%w: file %s is not visible in the scope the URL was issued for", urlsign.ErrRevoked, g.File)
		}
		return err
	}
	l, err := s.o.Meta.Layout(ctx, g.Xorb)
	if err != nil {
		return err
	}
	size := objectSize(l)
	hdr := r.Header.Get("Range")
	want := g.Ranges
	if hdr != "" {
		rs, err := httprange.Parse(hdr)
		if err != nil {
			return err
		}
		if want, err = httprange.ResolveAll(rs, size); err != nil {
			return err
		}
	}
	if want, err = urlsign.Parts(g.Ranges, want); err != nil {
		return err
	}
	// Open the first range before answering, so that a failure (a fill from the origin, bytes
	// that fail verification) is still a clean status. Later parts open as they are reached.
	first, err := s.open(r, l, want[0])
	if err != nil {
		return err
	}
	defer first.close()
	// Over HTTP/1.1+TLS the body goes out in socket writes of batchBytes, read from the cache
	// files copyBytes at a time, instead of one write(2) per 16 KiB TLS record and one read(2)
	// per 32 KiB.
	b := beginBatch(w, r)
	err = s.answer(w, r, b.copyBuf(), l, size, hdr, want, first)
	return errors.Join(err, b.end())
}

// answer writes the status, headers and body of a verified transfer: want's bytes of the xorb
// of layout l, the first of them open in first. buf (nil: none) is a copy buffer for send.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, buf []byte, l *xorb.Layout, size uint64, hdr string, want []httprange.ByteRange, first *span) error {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	if len(want) == 1 {
		h.Set("Content-Length", strconv.FormatUint(want[0].Len(), 10))
		status := http.StatusOK
		if hdr != "" {
			status = http.StatusPartialContent
			h.Set("Content-Range", httprange.ContentRange(want[0], size))
		}
		w.WriteHeader(status)
		return s.send(w, first, buf)
	}
	boundary := httprange.NewBoundary()
	var total uint64
	for i, b := range want {
		total += uint64(len(httprange.PartHeader(boundary, b, size, i == 0))) + b.Len()
	}
	total += uint64(len(httprange.MultipartClosing(boundary)))
	h.Set("Content-Type", "multipart/byteranges; boundary="+boundary)
	h.Set("Content-Length", strconv.FormatUint(total, 10))
	w.WriteHeader(http.StatusPartialContent)
	for i, b := range want {
		part := first
		if i > 0 {
			var err error
			if part, err = s.open(r, l, b); err != nil {
				return err // the short body tells the client; it retries
			}
		}
		if _, err := io.WriteString(w, httprange.PartHeader(boundary, b, size, i == 0)); err != nil {
			part.close()
			return err
		}
		err := s.send(w, part, buf)
		part.close()
		if err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, httprange.MultipartClosing(boundary))
	return err
}

// span is an open, verified byte range of a xorb: the chunk-aligned cached range rr, of which
// the requested bytes are n bytes after the first skip.
type span struct {
	rr      *datacache.Range
	skip, n int64
}

// close releases the cached files; it is idempotent.
func (p *span) close() {
	if p.rr != nil {
		p.rr.Close()
		p.rr = nil
	}
}

// open opens the stored bytes b of the xorb from the data cache, as the chunk-aligned range
// that covers them. Every byte of that range has been verified against l when open returns.
func (s *Server) open(r *http.Request, l *xorb.Layout, b httprange.ByteRange) (*span, error) {
	if b.End >= uint64(l.ChunkAreaLen()) {
		return nil, fmt.Errorf("%w: bytes %s are outside the chunks of xorb %s", httprange.ErrUnsatisfiable, b, l.Hash)
	}
	i := firstEndAbove(l, int64(b.Start))
	j := firstEndAbove(l, int64(b.End))
	cs, ce := l.ByteRange(uint32(i), uint32(j)+1)
	rr, err := s.o.Bytes.ReadRange(r.Context(), l, int64(cs), int64(ce))
	if err != nil {
		if s.isCorrupt(err) {
			s.m.verifyFailures.Inc()
			s.log.ErrorContext(r.Context(), "origin sent corrupt xorb bytes", "xorb", l.Hash.String(), "err", err)
		}
		return nil, err
	}
	if rr.Len() != int64(ce-cs) {
		rr.Close()
		return nil, fmt.Errorf("%w: byte source offers %d bytes for [%d,%d)", ErrCorrupt, rr.Len(), cs, ce)
	}
	return &span{rr: rr, skip: int64(b.Start - uint64(cs)), n: int64(b.Len())}, nil
}

// send streams p's requested bytes to w. With buf (a batching HTTP/1.1+TLS answer) it copies
// through buf, one read of the cache file per len(buf) bytes. Otherwise a chunk-aligned range
// (what the edge's own answers ask for) goes through the Range's WriteTo, which hands each
// cached file to w's ReadFrom: sendfile on plain-HTTP TCP, one pooled 32 KiB buffer on HTTP/2
// and HTTP/3. A short body means an I/O error after the header; the client sees the short
// Content-Length and retries.
func (s *Server) send(w io.Writer, p *span, buf []byte) error {
	if p.skip > 0 {
		if _, err := p.rr.Discard(p.skip); err != nil {
			return fmt.Errorf("skip %d cached bytes: %w", p.skip, err)
		}
	}
	var n int64
	var err error
	switch {
	case buf != nil:
		// struct{io.Writer} hides w's ReadFrom, which would copy through its own buffer.
		n, err = io.CopyBuffer(struct{ io.Writer }{w}, io.LimitReader(p.rr, p.n), buf)
	case p.rr.Len() == p.n:
		n, err = p.rr.WriteTo(w)
	default:
		n, err = io.Copy(w, io.LimitReader(p.rr, p.n))
	}
	s.m.transferBytes.Add(float64(n))
	if err == nil && n != p.n {
		err = fmt.Errorf("sent %d of %d bytes: %w", n, p.n, io.ErrUnexpectedEOF)
	}
	return err
}

// firstEndAbove is the index of the chunk holding stored byte off (off < ChunkAreaLen).
func firstEndAbove(l *xorb.Layout, off int64) int {
	lo, hi := 0, l.NumChunks()
	for lo < hi {
		m := (lo + hi) / 2
		if int64(l.StoredEnds[m]) > off {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}
