package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/ingest"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
)

// readUpload reads a request body of at most limit bytes (ingestgate.go): it takes a slot of
// the token's scope, then reads the body paced and within the body deadline, reserving ingest
// memory as the body grows, never by its declared length. The caller must call release when
// done with the body; on error nothing is held.
func (s *Server) readUpload(w http.ResponseWriter, r *http.Request, limit int64) (body []byte, release func(), err error) {
	b, done, err := s.admitBody(w, r, limit)
	if err != nil {
		return nil, nil, err
	}
	body, err = b.read(w, r, limit)
	if err != nil {
		done()
		return nil, nil, err
	}
	return body, done, nil
}

// admitBody refuses a body declared longer than limit and takes the scope's upload slot
// (admitUpload); the bodyReader it returns reserves ingest memory, and done releases both. Shared
// by buffered uploads (readUpload) and streamed ones (postXorbStream).
func (s *Server) admitBody(w http.ResponseWriter, r *http.Request, limit int64) (b *bodyReader, done func(), err error) {
	if r.ContentLength > limit {
		return nil, nil, fmt.Errorf("%w: %d bytes, limit %d", httpapi.ErrTooLarge, r.ContentLength, limit)
	}
	free, err := s.admitUpload(w, r)
	if err != nil {
		return nil, nil, err
	}
	b = &bodyReader{s: s, mem: s.ingestMu, wait: s.cfg.Limits.IngestWait.D()}
	return b, func() { b.release(); free() }, nil
}

func pathHash(r *http.Request, name string) (hash.Hash, error) {
	h, err := hash.Parse(r.PathValue(name))
	if err != nil {
		return h, fmt.Errorf("%s: %w", name, err)
	}
	return h, nil
}

// postXorb: POST /v1/xorbs/{prefix}/{hash} → {"was_inserted": bool}.
func (s *Server) postXorb(w http.ResponseWriter, r *http.Request) error {
	h, err := pathHash(r, "hash")
	if err != nil {
		return err
	}
	prefix := r.PathValue("prefix")
	if prefix != ingest.Prefix {
		return fmt.Errorf("%w: %q", ingest.ErrBadPrefix, prefix)
	}
	return s.postXorbStream(w, r, prefix, h) // xorbstream.go
}

// headXorb: HEAD /v1/xorbs/{prefix}/{hash} → Content-Length = stored object size, for the
// xorbs the token's scope uploaded itself (index.Index.Possessed); any other xorb is 404,
// stored or not. No stock client sends this request; answering it for any hash would tell every
// reader whether some content is stored, and its stored size.
func (s *Server) headXorb(w http.ResponseWriter, r *http.Request) error {
	h, err := pathHash(r, "hash")
	if err != nil {
		return err
	}
	if p := r.PathValue("prefix"); p != ingest.Prefix {
		return fmt.Errorf("%w: %q", ingest.ErrBadPrefix, p)
	}
	notFound := fmt.Errorf("%w: xorb %s", index.ErrNotFound, h)
	held, err := s.idx.Possessed(r.Context(), claims(r.Context()).Scope, []hash.Hash{h})
	if err != nil {
		return err
	}
	if !held[h] {
		return notFound
	}
	size, err := s.idx.XorbSize(r.Context(), h)
	if errors.Is(err, index.ErrNotFound) {
		return notFound
	} else if err != nil {
		return err
	}
	w.Header().Set("Content-Length", strconv.FormatUint(size, 10))
	w.WriteHeader(http.StatusOK)
	return nil
}

// registerShard reads a shard body and registers it under the token's scope.
func (s *Server) registerShard(w http.ResponseWriter, r *http.Request, progress func(ingest.Progress)) (bool, error) {
	body, release, err := s.readUpload(w, r, shard.MaxSize)
	if err != nil {
		return false, err
	}
	defer release()
	return s.ingest.RegisterShard(r.Context(), claims(r.Context()).Scope, body, progress)
}

// postShardV1: POST /v1/shards → {"result": 1} (registered) or {"result": 0} (known).
func (s *Server) postShardV1(w http.ResponseWriter, r *http.Request) error {
	inserted, err := s.registerShard(w, r, nil)
	if err != nil {
		return err
	}
	res := wire.ShardExists
	if inserted {
		res = wire.ShardSyncPerformed
	}
	httpapi.WriteJSON(w, http.StatusOK, wire.UploadShardResponse{Result: res})
	return nil
}

// postShardV2: POST /v2/shards → NDJSON progress (docs/protocol.md §2.7). The stream starts with
// the first progress frame, which comes after the body was read and parsed, so a malformed body
// still gets a plain 4xx; later failures are error frames. While the work runs, the last frame
// is re-sent every heartbeat interval.
func (s *Server) postShardV2(w http.ResponseWriter, r *http.Request) error {
	body, release, err := s.readUpload(w, r, shard.MaxSize)
	if err != nil {
		return err
	}
	defer release()
	st := newFrameStream(w, s.cfg.Limits.ShardHeartbeat.D())
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	done := make(chan shardOutcome, 1)
	go func() {
		ins, err := s.ingest.RegisterShard(ctx, claims(r.Context()).Scope, body, st.progress)
		done <- shardOutcome{ins, err}
	}()
	res := st.run(done)
	if res.err != nil && !st.started {
		return res.err // nothing streamed yet: an ordinary error answer
	}
	if res.err != nil {
		status, _ := s.errs.Status(res.err)
		if status >= http.StatusInternalServerError {
			s.log.ErrorContext(r.Context(), "shard registration failed", "request_id",
				httpapi.RequestID(r.Context()), "err", res.err)
		}
		st.write(errorFrame(res.err, status))
		return res.err
	}
	st.write(resultFrame(res.inserted))
	return nil
}
