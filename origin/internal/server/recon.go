package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// maxParallelWriters bounds the goroutines one answer is written by.
const maxParallelWriters = 8

func (s *Server) reconV1(w http.ResponseWriter, r *http.Request) error {
	return s.reconstruct(w, r, false)
}
func (s *Server) reconV2(w http.ResponseWriter, r *http.Request) error {
	return s.reconstruct(w, r, true)
}

// file returns the record of the file in the request path if the token's scope sees it. The
// empty file (all-zero id) exists in every scope: it has no content to protect.
func (s *Server) file(ctx context.Context, r *http.Request) (*recon.FileRecord, error) {
	h, err := pathHash(r, "file")
	if err != nil {
		return nil, err
	}
	if h.IsZero() {
		return &recon.FileRecord{}, nil
	}
	return s.idx.File(ctx, h, claims(ctx).Scope)
}

// reconstruct: GET /v1|v2/reconstructions/{file} with an optional single Range
// (docs/protocol.md §2.3, §9). Other scopes' files are 404; a range past EOF is 416.
func (s *Server) reconstruct(w http.ResponseWriter, r *http.Request, v2 bool) error {
	start := time.Now()
	ctx := r.Context()
	rec, err := s.file(ctx, r)
	if err != nil {
		return err
	}
	var rng *httprange.Range
	if hdr := r.Header.Get("Range"); hdr != "" {
		one, err := httprange.ParseOne(hdr)
		if err != nil {
			return err
		}
		rng = &one
	}
	a, err := recon.Plan(rec, rng, s.layoutFunc(ctx))
	if err != nil {
		return err
	}
	enc := recon.Encoder{}
	if a.Len() >= s.cfg.Limits.ReconParallelAt {
		extra := s.permits.takeHalf(maxParallelWriters - 1)
		defer s.permits.release(extra)
		if extra > 0 {
			enc.Workers = 1 + extra
			s.m.reconParallel.Inc()
		}
	}
	// The URLs are bound to this file and the token's scope: hiding the file revokes them.
	sign := s.signer.Bind(claims(ctx).Scope, rec.Hash, s.signer.Expiry(0))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if v2 {
		err = enc.WriteV2(w, a, sign)
	} else {
		err = enc.WriteV1(w, a, sign)
	}
	version := "v1"
	if v2 {
		version = "v2"
	}
	s.m.recon.WithLabelValues(version).Observe(time.Since(start).Seconds())
	return err
}

// layoutFunc loads layouts for recon.Plan (at most two per plan).
func (s *Server) layoutFunc(ctx context.Context) recon.LayoutFunc {
	return func(h hash.Hash) (*xorb.Layout, error) {
		m, err := s.idx.Layouts(ctx, []hash.Hash{h})
		if err != nil {
			return nil, err
		}
		l, ok := m[h]
		if !ok {
			return nil, fmt.Errorf("layout of xorb %s referenced by a file record is missing", h)
		}
		return l, nil
	}
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
