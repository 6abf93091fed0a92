package server

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/ingest"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// postXorbStream is postXorb: the body is validated as it arrives (ingest.Service.PutXorbStream)
// under the admission every upload has (the scope's slot, the pace floor, the body deadline,
// the size limit), with a fixed reservation of ingest memory, xorb.StreamMemory, taken before
// the first byte is read. On the local disk the validated chunks go to the store as they
// arrive; on S3 the body is kept in memory reserved 2 MiB at a time from the same budget as it
// arrives (never by the declared length) until the whole object can be sent in one
// conditional PUT (docs/decisions.md, "Streamed xorb uploads", "Spooled xorb uploads on S3").
func (s *Server) postXorbStream(w http.ResponseWriter, r *http.Request, prefix string, h hash.Hash) error {
	limit := int64(ingest.MaxXorbBody)
	b, done, err := s.admitBody(w, r, limit)
	if err != nil {
		return err
	}
	defer done()
	if err := b.reserve(r.Context(), xorb.StreamMemory); err != nil {
		return err
	}
	var mem ingest.Memory
	if !s.ingest.Streams() {
		mem = func(n int64) error { return b.reserve(r.Context(), n) }
	}
	body := b.stream(w, r, limit)
	inserted, err := s.ingest.PutXorbStream(r.Context(), claims(r.Context()).Scope, prefix, h, body, mem)
	if body.err != nil {
		// The body failed, whatever that did to the validation: too slow, too large, cut off.
		return b.bodyErr(body.err, body.end, int(body.n), limit)
	}
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, wire.UploadXorbResponse{WasInserted: inserted})
	return nil
}

// streamBody is an upload body read paced, within the body deadline and the size limit, that
// remembers how it failed.
type streamBody struct {
	r   io.Reader
	end time.Time // the body deadline
	n   int64     // bytes read
	err error     // the first failed read (not io.EOF)
}

// stream returns r's body as bodyReader.read reads it, for a caller that consumes it piecewise.
func (b *bodyReader) stream(w http.ResponseWriter, r *http.Request, limit int64) *streamBody {
	pr, end := b.paced(w, r, limit)
	return &streamBody{r: pr, end: end}
}

func (sb *streamBody) Read(p []byte) (int, error) {
	if sb.err != nil {
		return 0, sb.err
	}
	n, err := sb.r.Read(p)
	sb.n += int64(n)
	if err == nil && n == 0 && time.Now().After(sb.end) {
		err = os.ErrDeadlineExceeded
	}
	if err != nil && !errors.Is(err, io.EOF) {
		sb.err = err
	}
	return n, err
}
