package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/readpath"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/urlsign"
)

// maxWriters bounds the goroutines one answer is written by; Server.maxWriters also caps
// them at GOMAXPROCS, since a writer beyond the cores only adds buffering and scheduling.
const maxWriters = 8

// DefaultURLExpiryRound is Options.URLExpiryRound when 0: URLs expire on whole minutes.
const DefaultURLExpiryRound = time.Minute

// permitted is the edge's middleware around the shared reconstruction handlers: a request is
// answered here only with a free permit; without one it goes to the origin unchanged
// (counted as a no_permit fallback). Nothing is answered 429/503 for saturation.
func (s *Server) permitted(next handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if !s.permits.tryAcquire() {
			s.m.fallbacks.WithLabelValues("no_permit").Inc()
			return s.forward(w, r)
		}
		defer s.permits.release(1)
		return next(w, r)
	}
}

// answerLayer is the edge's readpath.Answerer: the answer-cache layer in front of readpath.Fresh.
// The shared handler has already found the record visible in the token's scope (the metadata
// cache); the answer has the same terms and ranges as the origin's for the same query (both
// run recon.Plan on the same record), with URLs for the edge's own transfer route.
//
// Whole-file answers are written from the answer cache (one Content-Length answer, two
// writes) once encoded for the current URL expiry; ranged answers of large files copy their
// terms from the cached whole-file terms. Both are byte-identical to encoding afresh with the
// same expiry.
type answerLayer Server

// Answer implements readpath.Answerer.
func (sa *answerLayer) Answer(w http.ResponseWriter, r *http.Request, q readpath.Query) error {
	s := (*Server)(sa)
	rec := q.Rec
	exp := s.o.Signer.Expiry(s.o.URLExpiryRound)
	// The URLs are bound to this file and the token's scope: hiding the file there revokes them.
	signer := s.o.Signer.Bind(q.Scope, rec.Hash, exp)
	whole := wholeRange(rec, q.Range)
	cacheable := s.answers.usable(len(rec.Terms))
	if whole && cacheable && s.o.URLExpiryRound > 0 {
		if s.o.ReadAhead != nil && s.o.ReadAheadBytes > 0 {
			if a, err := s.plan(r.Context(), rec, true, nil); err == nil { // from the plan cache
				s.readAhead(r.Context(), a)
			}
		}
		return s.writeWhole(w, r, rec, q.V2, q.Scope, exp.Unix(), signer)
	}
	var terms *recon.Terms
	if !whole && cacheable {
		var err error
		if terms, err = s.rangedTerms(rec); err != nil {
			return err
		}
	}
	a, err := s.plan(r.Context(), rec, whole, q.Range)
	if err != nil {
		return err
	}
	s.readAhead(r.Context(), a)
	b := beginBatch(w, r)
	err = s.fresh.Write(w, a, q.V2, signer, terms)
	return errors.Join(err, b.end())
}

// wholeRange reports whether rng (nil: none) asks for every byte of rec: the same answer as
// no range, nothing to trim, offset 0.
func wholeRange(rec *recon.FileRecord, rng *httprange.Range) bool {
	if rng == nil {
		return true
	}
	if rec.Size == 0 {
		return false
	}
	br, err := rng.Resolve(rec.Size)
	return err == nil && br.Start == 0 && br.End == rec.Size-1
}

// encodedAnswer is a whole-file answer: the record's encoded terms and the signed rest.
type encodedAnswer struct {
	terms *recon.Terms
	rest  []byte
}

// encodeWhole encodes rec's whole-file answer signed for scope and expiry exp, reusing terms
// (the record's cached terms; nil: none cached), and caches what it encoded. A whole-file plan
// reads no layouts, so it needs no request context: one caller leaving does not fail the others
// waiting for the result.
func (s *Server) encodeWhole(rec *recon.FileRecord, terms *recon.Terms, v2 bool, scope string, exp int64, signer urlsign.Bound) (encodedAnswer, error) {
	s.m.answerEncodes.Inc()
	a, err := s.plan(context.Background(), rec, true, nil)
	if err != nil {
		return encodedAnswer{}, err
	}
	if terms == nil {
		if terms, err = s.encodeTerms(rec); err != nil {
			return encodedAnswer{}, err
		}
	}
	hint := make([]byte, 0, 64+200*a.NumRanges())
	var rest []byte
	if v2 {
		rest = recon.Encoder{}.AppendRestV2(hint, a, signer)
	} else {
		rest = recon.Encoder{}.AppendRestV1(hint, a, signer)
	}
	s.answers.putRest(rec, v2, scope, exp, rest)
	return encodedAnswer{terms, rest}, nil
}

// writeWhole writes rec's whole-file answer signed for scope and expiry exp from the answer
// cache, encoding and caching what is missing: the terms (once per record) and the rest (once
// per record, version, scope and expiry).
func (s *Server) writeWhole(w http.ResponseWriter, r *http.Request, rec *recon.FileRecord, v2 bool, scope string, exp int64, signer urlsign.Bound) error {
	terms, rest := s.answers.lookup(rec, v2, scope, exp)
	s.m.countAnswer("answer", rest != nil)
	if rest == nil {
		// Concurrent misses of one answer (a popular file when a new expiry interval starts)
		// encode it once; the others wait for that encoding.
		key := fmt.Sprintf("%p/%t/%d/%s", rec, v2, exp, scope)
		v, err, _ := s.encodes.Do(key, func() (any, error) {
			t, b := s.answers.lookup(rec, v2, scope, exp)
			if b != nil {
				return encodedAnswer{t, b}, nil
			}
			return s.encodeWhole(rec, t, v2, scope, exp, signer)
		})
		if err != nil {
			return err
		}
		terms, rest = v.(encodedAnswer).terms, v.(encodedAnswer).rest
	}
	prefix := terms.Prefix()
	b := beginBatch(w, r)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(prefix)+len(rest)))
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(prefix)
	if err == nil {
		_, err = w.Write(rest)
	}
	return errors.Join(err, b.end())
}

// rangedTerms returns the cached terms of rec for a ranged answer, encoding and caching them
// first for a file of at least rangedTermsAt terms; nil for smaller files not cached yet.
func (s *Server) rangedTerms(rec *recon.FileRecord) (*recon.Terms, error) {
	if terms, _ := s.answers.lookup(rec, true, "", 0); terms != nil {
		s.m.countAnswer("terms", true)
		return terms, nil
	}
	if len(rec.Terms) < rangedTermsAt {
		return nil, nil
	}
	s.m.countAnswer("terms", false)
	return s.encodeTerms(rec)
}

// encodeTerms encodes rec's whole-file terms and caches them. Concurrent calls for one record
// (ranged or whole-file misses of a file just looked up) encode once; the others wait for that
// encoding. A whole-file plan reads no layouts, so it needs no request context: one caller
// leaving does not fail the others.
func (s *Server) encodeTerms(rec *recon.FileRecord) (*recon.Terms, error) {
	v, err, _ := s.encodes.Do(fmt.Sprintf("%p/terms", rec), func() (any, error) {
		if t, _ := s.answers.lookup(rec, true, "", 0); t != nil {
			return t, nil
		}
		s.m.termsEncodes.Inc()
		a, err := s.plan(context.Background(), rec, true, nil)
		if err != nil {
			return nil, err
		}
		t, err := recon.EncodeTerms(a)
		if err != nil {
			return nil, err
		}
		return s.answers.putTerms(rec, t), nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*recon.Terms), nil
}

// plan returns the answer for rng of rec (whole: the whole file, rng is ignored). Whole-file
// answers come from the answer cache's plans when they can.
func (s *Server) plan(ctx context.Context, rec *recon.FileRecord, whole bool, rng *httprange.Range) (*recon.Answer, error) {
	if !whole {
		return recon.Plan(rec, rng, s.fresh.LayoutFunc(ctx))
	}
	if a, ok := s.answers.plan(rec); ok {
		s.m.planCache.WithLabelValues("hit").Inc()
		return a, nil
	}
	a, err := recon.Plan(rec, nil, s.fresh.LayoutFunc(ctx))
	if err != nil {
		return nil, err
	}
	s.m.planCache.WithLabelValues("miss").Inc()
	s.answers.putPlan(rec, a)
	return a, nil
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
			// The reason names the origin's address: it goes to the log, not to the prober.
			s.log.DebugContext(r.Context(), "not ready", "err", err)
			httpapi.WriteJSON(w, http.StatusServiceUnavailable, httpapi.ErrorBody{
				Error: "not ready: the origin is unreachable and nothing is cached", Code: "not_ready"})
			return nil
		}
	}
	httpapi.WriteRawJSON(w, http.StatusOK, []byte(`{"status":"ready"}`+"\n"))
	return nil
}
