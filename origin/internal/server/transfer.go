package server

import (
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/xetcdn/xetcdn/origin/internal/ingest"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/urlsign"
)

// transfer: GET /v1/transfer/xorbs/default/{hash}?r=…&x=…&s=… — the signed transfer route
// (xet-protocol.md §2.10). No Authorization: the URL is the credential. Every requested range
// must lie inside the signed set (403 otherwise, also when expired or tampered). One range →
// 206 with exactly those bytes; several → 206 multipart/byteranges, one part per requested
// range, in request order; no Range → the whole object, if the signed set covers it.
func (s *Server) transfer(w http.ResponseWriter, r *http.Request) error {
	xh, signed, err := s.signer.VerifyRequest(r, s.now())
	if err != nil {
		return err
	}
	ctx := r.Context()
	size64, err := s.idx.XorbSize(ctx, xh)
	if err != nil {
		return err
	}
	size := size64
	var want []httprange.ByteRange
	hdr := r.Header.Get("Range")
	if hdr == "" {
		want = []httprange.ByteRange{{Start: 0, End: size - 1}}
	} else {
		rs, err := httprange.Parse(hdr)
		if err != nil {
			return err
		}
		want = make([]httprange.ByteRange, len(rs))
		for i, q := range rs {
			if want[i], err = q.Resolve(size); err != nil {
				return err
			}
		}
	}
	closed := make([]httprange.Range, len(want))
	for i, b := range want {
		closed[i] = httprange.Range{Kind: httprange.Closed, Start: b.Start, End: b.End}
	}
	if !urlsign.Allowed(signed, closed) {
		return fmt.Errorf("%w: requested ranges are outside the signed set", urlsign.ErrDenied)
	}
	key := ingest.XorbKey(xh)
	// Open the first range before answering, so a store failure is still a clean 503.
	first, err := s.objs.GetRange(ctx, key, int64(want[0].Start), int64(want[0].Len()))
	if err != nil {
		return err
	}
	defer func() {
		if first != nil {
			first.Close()
		}
	}()
	h := w.Header()
	if len(want) == 1 {
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Length", strconv.FormatUint(want[0].Len(), 10))
		status := http.StatusPartialContent
		if hdr == "" {
			status = http.StatusOK
		} else {
			h.Set("Content-Range", httprange.ContentRange(want[0], size))
		}
		w.WriteHeader(status)
		n, err := io.Copy(w, first)
		s.m.transferBytes.Add(float64(n))
		return err
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
		if _, err := io.WriteString(w, httprange.PartHeader(boundary, b, size, i == 0)); err != nil {
			return err
		}
		rc := first
		if i > 0 {
			if rc, err = s.objs.GetRange(ctx, key, int64(b.Start), int64(b.Len())); err != nil {
				return err // the short body tells the client; it retries
			}
		}
		n, err := io.Copy(w, rc)
		rc.Close()
		if i == 0 {
			first = nil
		}
		s.m.transferBytes.Add(float64(n))
		if err != nil {
			return err
		}
	}
	_, err = io.WriteString(w, httprange.MultipartClosing(boundary))
	return err
}
