package server

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// objectSize is the size of the stored xorb object l describes: chunk area, v1 footer and its
// u32 length (what the origin stores and Content-Range totals name).
func objectSize(l *xorb.Layout) uint64 {
	return uint64(l.ChunkAreaLen()) + uint64(xorb.FooterLen(l.NumChunks())) + 4
}

// transfer: GET /v1/transfer/xorbs/default/{hash}?r=…&x=…&s=… — the edge's signed transfer
// route. The URL is the credential (403 when tampered or expired, or when a requested range
// leaves the signed set). One range → 206 with exactly those bytes; several → 206
// multipart/byteranges, one part per requested range in request order; no Range header → the
// signed ranges. Every byte comes from XorbBytes, which verified it against the layout; bytes
// that fail verification are never sent (502).
func (s *Server) transfer(w http.ResponseWriter, r *http.Request) error {
	xh, signed, err := s.o.Signer.VerifyRequest(r, s.o.Now())
	if err != nil {
		return err
	}
	ctx := r.Context()
	l, err := s.o.Meta.Layout(ctx, xh)
	if err != nil {
		return err
	}
	size := objectSize(l)
	hdr := r.Header.Get("Range")
	var want []httprange.ByteRange
	if hdr == "" {
		want = signed
	} else {
		rs, err := httprange.Parse(hdr)
		if err != nil {
			return err
		}
		if want, err = httprange.ResolveAll(rs, size); err != nil {
			return err
		}
	}
	closed := make([]httprange.Range, len(want))
	for i, b := range want {
		closed[i] = httprange.Range{Kind: httprange.Closed, Start: b.Start, End: b.End}
	}
	if !urlsign.Allowed(signed, closed) {
		return fmt.Errorf("%w: requested ranges are outside the signed set", urlsign.ErrDenied)
	}
	// Read the first range before answering, so a failure is still a clean status.
	first, err := s.read(r, l, want[0])
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	if len(want) == 1 {
		h.Set("Content-Length", strconv.Itoa(len(first)))
		status := http.StatusOK
		if hdr != "" {
			status = http.StatusPartialContent
			h.Set("Content-Range", contentRange(want[0], size))
		}
		w.WriteHeader(status)
		n, err := w.Write(first)
		s.m.transferBytes.Add(float64(n))
		return err
	}
	boundary := newBoundary()
	var total uint64
	for i, b := range want {
		total += uint64(len(partHeader(boundary, b, size, i == 0))) + b.Len()
	}
	total += uint64(len(closing(boundary)))
	h.Set("Content-Type", "multipart/byteranges; boundary="+boundary)
	h.Set("Content-Length", strconv.FormatUint(total, 10))
	w.WriteHeader(http.StatusPartialContent)
	for i, b := range want {
		data := first
		if i > 0 {
			if data, err = s.read(r, l, b); err != nil {
				return err // the short body tells the client; it retries
			}
		}
		if _, err := io.WriteString(w, partHeader(boundary, b, size, i == 0)); err != nil {
			return err
		}
		n, err := w.Write(data)
		s.m.transferBytes.Add(float64(n))
		if err != nil {
			return err
		}
	}
	_, err = io.WriteString(w, closing(boundary))
	return err
}

// read returns the stored bytes b of the xorb, reading the chunk-aligned span that covers them.
func (s *Server) read(r *http.Request, l *xorb.Layout, b httprange.ByteRange) ([]byte, error) {
	if b.End >= uint64(l.ChunkAreaLen()) {
		return nil, fmt.Errorf("%w: bytes %s are outside the chunks of xorb %s", httprange.ErrUnsatisfiable, b, l.Hash)
	}
	i := firstEndAbove(l, int64(b.Start))
	j := firstEndAbove(l, int64(b.End))
	cs, ce := l.ByteRange(uint32(i), uint32(j)+1)
	data, err := s.o.Bytes.ReadBytes(r.Context(), l, int64(cs), int64(ce))
	if err != nil {
		if s.isCorrupt(err) {
			s.m.verifyFailures.Inc()
			s.log.ErrorContext(r.Context(), "origin sent corrupt xorb bytes", "xorb", l.Hash.String(), "err", err)
		}
		return nil, err
	}
	if uint64(len(data)) != uint64(ce-cs) {
		return nil, fmt.Errorf("%w: byte source returned %d bytes for [%d,%d)", ErrCorrupt, len(data), cs, ce)
	}
	return data[b.Start-uint64(cs) : b.End+1-uint64(cs)], nil
}

func contentRange(b httprange.ByteRange, size uint64) string {
	return fmt.Sprintf("bytes %d-%d/%d", b.Start, b.End, size)
}

// partHeader is the delimiter and headers before a part's bytes, framed as mime/multipart
// writes it (and as the clients' parsers expect).
func partHeader(boundary string, b httprange.ByteRange, size uint64, first bool) string {
	lead := "\r\n"
	if first {
		lead = ""
	}
	return lead + "--" + boundary + "\r\nContent-Type: application/octet-stream\r\nContent-Range: " +
		contentRange(b, size) + "\r\n\r\n"
}

func closing(boundary string) string { return "\r\n--" + boundary + "--\r\n" }

func newBoundary() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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
