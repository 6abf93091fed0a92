package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/ingest"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/urlsign"
)

// transfer: GET /v1/transfer/xorbs/default/{hash}?f=…&c=…&r=…&x=…&s=… — the signed transfer
// route (docs/protocol.md §2.10). No Authorization: the URL is the credential, and it is only
// good while the file it was issued for is visible in its scope (403 once hidden, also when
// expired or tampered). Every requested range must lie inside the signed set (403 otherwise);
// overlapping or adjacent ranges are coalesced, and a request that would still make more parts
// than the URL has signed ranges (and more than urlsign.MinParts) is 416 (urlsign.Parts), so
// that one URL never answers more than its signed span. One part → 206 with exactly those
// bytes; several → 206 multipart/byteranges, one part per (coalesced) range, in request order;
// no Range → the whole object, if the signed set covers it.
func (s *Server) transfer(w http.ResponseWriter, r *http.Request) error {
	g, err := s.signer.VerifyRequest(r, s.now())
	if err != nil {
		return err
	}
	ctx := r.Context()
	if err := s.granted(ctx, g); err != nil {
		return err
	}
	xh := g.Xorb
	size, err := s.idx.XorbSize(ctx, xh)
	if err != nil {
		return err
	}
	var want []httprange.ByteRange
	hdr := r.Header.Get("Range")
	if hdr == "" {
		want = []httprange.ByteRange{{Start: 0, End: size - 1}}
	} else {
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

// granted checks that the file g was issued for is still visible in g's scope: from the index's
// cached visibility answers (index.FileCache: dropped at once by a Hide through this origin,
// trusted for index.DefaultVisibilityTTL otherwise), so a warm URL costs no index round trip.
// A hidden file's URLs are refused with urlsign.ErrRevoked (403).
func (s *Server) granted(ctx context.Context, g urlsign.Grant) error {
	if _, err := s.idx.File(ctx, g.File, g.Scope); err != nil {
		if errors.Is(err, index.ErrNotFound) || errors.Is(err, index.ErrInvalid) {
			return fmt.Errorf("%w: file %s is not visible in the scope the URL was issued for", urlsign.ErrRevoked, g.File)
		}
		return err
	}
	return nil
}
