package readpath

import (
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/urlsign"
)

// Transfer serves GET /v1/transfer/xorbs/default/{hash}?f=…&c=…&r=…&x=…&s=…, the signed
// transfer route (docs/protocol.md §2.10). No Authorization: the URL is the credential, good
// only while the file it was issued for is visible in its scope (Source.Visible; 403 once
// hidden, also when expired or tampered). Every requested range must lie inside the signed set
// (403 otherwise); overlapping or adjacent ranges are coalesced, and a request that would still
// make more parts than the URL has signed ranges (and more than urlsign.MinParts) is 416
// (urlsign.Parts), so one URL never answers more than its signed span. One part → 206 with
// exactly those bytes; several → 206 multipart/byteranges, one part per (coalesced) range, in
// request order; no Range → Options.Unranged.
func (h *Handlers) Transfer(w http.ResponseWriter, r *http.Request) error {
	g, err := h.o.Signer.VerifyRequest(r, h.o.Now())
	if err != nil {
		return err
	}
	ctx := r.Context()
	if err := h.o.Source.Visible(ctx, g.File, g.Scope); err != nil {
		if errors.Is(err, ErrNotFound) {
			return errRevoked(g.File)
		}
		return err
	}
	x, err := h.o.Source.Xorb(ctx, g.Xorb)
	if err != nil {
		return err
	}
	size := x.Size()
	hdr := r.Header.Get("Range")
	var want []httprange.ByteRange
	switch {
	case hdr != "":
		rs, err := httprange.Parse(hdr)
		if err != nil {
			return err
		}
		if want, err = httprange.ResolveAll(rs, size); err != nil {
			return err
		}
	case h.o.Unranged == SignedRanges:
		want = g.Ranges
	default:
		want = []httprange.ByteRange{{Start: 0, End: size - 1}}
	}
	if want, err = urlsign.Parts(g.Ranges, want); err != nil {
		return err
	}
	// Open the first range before answering, so that a failure is still a clean status.
	// Later parts open as they are reached.
	first, err := x.Open(ctx, want[0])
	if err != nil {
		return err
	}
	defer first.Close()
	var buf []byte
	end := func() error { return nil }
	if h.o.Begin != nil {
		buf, end = h.o.Begin(w, r)
	}
	err = h.answerTransfer(w, r, buf, x, size, hdr != "", want, first)
	return errors.Join(err, end())
}

// answerTransfer writes the status, headers and body of a verified transfer: want's bytes of
// x, the first of them open in first.
func (h *Handlers) answerTransfer(w http.ResponseWriter, r *http.Request, buf []byte, x Xorb, size uint64, ranged bool, want []httprange.ByteRange, first Part) error {
	hd := w.Header()
	if len(want) == 1 {
		hd.Set("Content-Type", "application/octet-stream")
		hd.Set("Content-Length", strconv.FormatUint(want[0].Len(), 10))
		status := http.StatusOK
		if ranged {
			status = http.StatusPartialContent
			hd.Set("Content-Range", httprange.ContentRange(want[0], size))
		}
		w.WriteHeader(status)
		return h.send(w, first, buf)
	}
	boundary := httprange.NewBoundary()
	var total uint64
	for i, b := range want {
		total += uint64(len(httprange.PartHeader(boundary, b, size, i == 0))) + b.Len()
	}
	total += uint64(len(httprange.MultipartClosing(boundary)))
	hd.Set("Content-Type", "multipart/byteranges; boundary="+boundary)
	hd.Set("Content-Length", strconv.FormatUint(total, 10))
	w.WriteHeader(http.StatusPartialContent)
	for i, b := range want {
		part := first
		if i > 0 {
			var err error
			if part, err = x.Open(r.Context(), b); err != nil {
				return err // the short body tells the client; it retries
			}
		}
		if _, err := io.WriteString(w, httprange.PartHeader(boundary, b, size, i == 0)); err != nil {
			part.Close()
			return err
		}
		err := h.send(w, part, buf)
		part.Close()
		if err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, httprange.MultipartClosing(boundary))
	return err
}

// send writes p to w and counts the bytes.
func (h *Handlers) send(w io.Writer, p Part, buf []byte) error {
	n, err := p.Send(w, buf)
	if h.o.TransferBytes != nil {
		h.o.TransferBytes.Add(float64(n))
	}
	return err
}
