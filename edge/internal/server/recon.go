package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// maxWriters bounds the goroutines one answer is written by; Server.maxWriters also caps
// them at GOMAXPROCS, since a writer beyond the cores only adds buffering and scheduling.
const maxWriters = 8

func (s *Server) reconV1(w http.ResponseWriter, r *http.Request) error {
	return s.reconstruct(w, r, false)
}
func (s *Server) reconV2(w http.ResponseWriter, r *http.Request) error {
	return s.reconstruct(w, r, true)
}

// pathHash parses the hash path parameter name (400 when malformed).
func pathHash(r *http.Request, name string) (hash.Hash, error) {
	return hash.Parse(r.PathValue(name))
}

// file returns the record of the file in the request path if the token's scope sees it. The
// empty file (all-zero id) exists in every scope, as on the origin.
func (s *Server) file(ctx context.Context, r *http.Request) (*recon.FileRecord, error) {
	h, err := pathHash(r, "file")
	if err != nil {
		return nil, err
	}
	if h.IsZero() {
		return &recon.FileRecord{}, nil
	}
	return s.o.Meta.File(ctx, h, claims(ctx).Scope)
}

// reconstruct: GET /v1|v2/reconstructions/{file} with an optional single Range, answered from
// the metadata cache with URLs for the edge's transfer route: the same terms and ranges as the
// origin gives for the same query (both run recon.Plan on the same record). Without a free
// permit the request goes to the origin unchanged.
func (s *Server) reconstruct(w http.ResponseWriter, r *http.Request, v2 bool) error {
	if !s.permits.tryAcquire() {
		s.m.fallbacks.WithLabelValues("no_permit").Inc()
		return s.forward(w, r)
	}
	defer s.permits.release(1)
	start := time.Now()
	ctx := r.Context()
	var rng *httprange.Range
	if hdr := r.Header.Get("Range"); hdr != "" {
		one, err := httprange.ParseOne(hdr)
		if err != nil {
			return err
		}
		rng = &one
	}
	rec, err := s.file(ctx, r)
	if err != nil {
		return err
	}
	a, err := s.plan(ctx, rec, rng)
	if err != nil {
		return err
	}
	enc := recon.Encoder{}
	if a.Len() >= s.o.ParallelAt {
		if extra := s.permits.takeHalf(s.maxWriters - 1); extra > 0 {
			defer s.permits.release(extra)
			enc.Workers = 1 + extra
			s.m.parallel.Inc()
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	version := "v1"
	if v2 {
		version = "v2"
		err = enc.WriteV2(w, a, s.o.Signer)
	} else {
		err = enc.WriteV1(w, a, s.o.Signer)
	}
	s.m.recon.WithLabelValues(version).Observe(time.Since(start).Seconds())
	return err
}

// plan returns the answer for rng of rec (nil: the whole file). Whole-file answers, including
// a range that resolves to every byte of the file, come from the plan cache when they can.
func (s *Server) plan(ctx context.Context, rec *recon.FileRecord, rng *httprange.Range) (*recon.Answer, error) {
	whole := rng == nil
	if !whole && rec.Size > 0 {
		if br, err := rng.Resolve(rec.Size); err == nil && br.Start == 0 && br.End == rec.Size-1 {
			whole = true // the same answer as no range: nothing to trim, offset 0
		}
	}
	if !whole {
		return recon.Plan(rec, rng, func(h hash.Hash) (*xorb.Layout, error) { return s.o.Meta.Layout(ctx, h) })
	}
	if a, ok := s.plans.get(rec); ok {
		s.m.planCache.WithLabelValues("hit").Inc()
		return a, nil
	}
	a, err := recon.Plan(rec, nil, func(h hash.Hash) (*xorb.Layout, error) { return s.o.Meta.Layout(ctx, h) })
	if err != nil {
		return nil, err
	}
	s.m.planCache.WithLabelValues("miss").Inc()
	s.plans.put(rec, a)
	return a, nil
}

// headFile: HEAD /v1/files/{file} → Content-Length = file size; 404 when not visible.
func (s *Server) headFile(w http.ResponseWriter, r *http.Request) error {
	rec, err := s.file(r.Context(), r)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Length", strconv.FormatUint(rec.Size, 10))
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	httpapi.WriteRawJSON(w, http.StatusOK, []byte(`{"status":"ok"}`+"\n"))
	return nil
}

// readyz answers 200 when the edge can serve: the origin answers, or the caches hold something.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	if s.o.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := s.o.Ready(ctx); err != nil {
			httpapi.WriteJSON(w, http.StatusServiceUnavailable, httpapi.ErrorBody{Error: err.Error(), Code: "not_ready"})
			return nil
		}
	}
	httpapi.WriteRawJSON(w, http.StatusOK, []byte(`{"status":"ready"}`+"\n"))
	return nil
}
