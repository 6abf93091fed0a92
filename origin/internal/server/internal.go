package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/ingest"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/internalapi"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// The internal API serves edges (tokens with access "edge"). Its routes, parameters, limits and
// formats are shared/internalapi's (docs/protocol.md §16.3); the edge's client uses the same
// package.

// eventsPoll is how often a waiting /internal/v1/events request asks the index again.
const eventsPoll = 500 * time.Millisecond

// internalFile: GET /internal/v1/files/{hash}?scope=S → the binary FileRecord
// (recon.FileRecord.MarshalBinary) if the file is visible in S, else 404. HEAD answers the same
// status without a body (visibility check: the index's Visible probe, answered by its file
// cache when warm). GET
// ships the stored encoding as the index holds it (index.Raw, visibility checked in the same
// lookup) instead of decoding and re-encoding the record.
func (s *Server) internalFile(w http.ResponseWriter, r *http.Request) error {
	h, err := pathHash(r, internalapi.PathValueHash)
	if err != nil {
		return err
	}
	scope := r.URL.Query().Get(internalapi.ParamScope)
	if scope == "" {
		return fmt.Errorf("%w: scope parameter is required", httpapi.ErrBadRequest)
	}
	ctx := r.Context()
	if r.Method == http.MethodHead { // the edge's visibility check: no record read
		if err := s.idx.Visible(ctx, h, scope); err != nil {
			return err
		}
		w.WriteHeader(http.StatusOK)
		return nil
	}
	b, err := s.idx.FileBytes(ctx, h, scope)
	if err != nil {
		return err
	}
	return writeBinary(w, b)
}

// internalLayouts: GET /internal/v1/layouts?h=H&h=H… → the layouts answer
// (internalapi.AppendLayouts): the found xorbs' binary layouts in request order, missing
// xorbs left out, repeats answered once. The encodings come from index.Raw (stored bytes, or
// cached layouts encoded), so no layout is decoded for this route.
func (s *Server) internalLayouts(w http.ResponseWriter, r *http.Request) error {
	hs := r.URL.Query()[internalapi.ParamHash]
	if len(hs) == 0 || len(hs) > internalapi.MaxLayoutsPerRequest {
		return fmt.Errorf("%w: want 1 to %d h parameters, got %d", httpapi.ErrBadRequest, internalapi.MaxLayoutsPerRequest, len(hs))
	}
	want := make([]hash.Hash, len(hs))
	for i, v := range hs {
		var err error
		if want[i], err = hash.Parse(v); err != nil {
			return err
		}
	}
	got, err := s.layoutBytes(r.Context(), want)
	if err != nil {
		return err
	}
	out, err := internalapi.AppendLayouts(nil, want, got)
	if err != nil {
		return err
	}
	return writeBinary(w, out)
}

// layoutBytes returns the binary layouts of the xorbs in hs that exist (index.Raw).
func (s *Server) layoutBytes(ctx context.Context, hs []hash.Hash) (map[hash.Hash][]byte, error) {
	return s.idx.LayoutBytes(ctx, hs)
}

// internalXorb: GET /internal/v1/xorbs/{hash} with an optional single Range → raw bytes of the
// stored object (chunk area + footer), 206 for a range.
func (s *Server) internalXorb(w http.ResponseWriter, r *http.Request) error {
	h, err := pathHash(r, internalapi.PathValueHash)
	if err != nil {
		return err
	}
	ctx := r.Context()
	size, err := s.idx.XorbSize(ctx, h)
	if err != nil {
		return err
	}
	br := httprange.ByteRange{Start: 0, End: size - 1}
	status := http.StatusOK
	if hdr := r.Header.Get("Range"); hdr != "" {
		q, err := httprange.ParseOne(hdr)
		if err != nil {
			return err
		}
		if br, err = q.Resolve(size); err != nil {
			return err
		}
		status = http.StatusPartialContent
		w.Header().Set("Content-Range", httprange.ContentRange(br, size))
	}
	rc, err := s.objs.GetRange(ctx, ingest.XorbKey(h), int64(br.Start), int64(br.Len()))
	if err != nil {
		return err
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatUint(br.Len(), 10))
	w.WriteHeader(status)
	_, err = io.Copy(w, rc)
	return err
}

// internalJWKS: GET /internal/v1/jwks → the token verification keys as a JWKS document.
func (s *Server) internalJWKS(w http.ResponseWriter, r *http.Request) error {
	httpapi.WriteRawJSON(w, http.StatusOK, s.jwks)
	return nil
}

// internalEvents: GET /internal/v1/events?after=N[&wait=SECONDS] → {"events":[…]}
// (internalapi.AppendEvents) with the visibility revocations after N. When there are none it
// waits up to wait seconds (at most the configured limit, 30 s by default) for one before
// answering with an empty list.
func (s *Server) internalEvents(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	after, err := strconv.ParseInt(q.Get(internalapi.ParamAfter), 10, 64)
	if q.Get(internalapi.ParamAfter) == "" {
		after, err = 0, nil
	}
	if err != nil || after < 0 {
		return fmt.Errorf("%w: after must be a sequence number", httpapi.ErrBadRequest)
	}
	wait := s.cfg.Limits.EventsWait.D()
	if v := q.Get(internalapi.ParamWait); v != "" {
		secs, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return fmt.Errorf("%w: wait must be whole seconds", httpapi.ErrBadRequest)
		}
		wait = min(wait, time.Duration(secs)*time.Second)
	}
	ctx := r.Context()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(eventsPoll)
	defer tick.Stop()
	for {
		evs, err := s.idx.Events(ctx, after, 0)
		if err != nil {
			return err
		}
		if len(evs) > 0 {
			out := make([]internalapi.Event, len(evs))
			for i, e := range evs {
				out[i] = internalapi.Event{Seq: e.Seq, Scope: e.Scope, Files: e.Files, At: e.At, Xorbs: e.Xorbs}
			}
			b, err := internalapi.AppendEvents(nil, out)
			if err != nil {
				return err
			}
			httpapi.WriteRawJSON(w, http.StatusOK, b)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
		case <-s.draining:
		case <-tick.C:
			continue
		}
		b, err := internalapi.AppendEvents(nil, nil)
		if err != nil {
			return err
		}
		httpapi.WriteRawJSON(w, http.StatusOK, b)
		return nil
	}
}

func writeBinary(w http.ResponseWriter, b []byte) error {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(b)
	return err
}
