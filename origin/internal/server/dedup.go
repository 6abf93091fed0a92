package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
)

// dedup: GET /v1/chunks/{default|default-merkledb}/{hash} — the global-dedup query
// (docs/protocol.md §2.4, §8.6). The answer is a footer-bearing shard with an empty file section,
// the xorbs the newest shard that registered the chunk offers (the xorbs it describes, then
// those its files reference: index.Registration.Xorbs), chunk hashes keyed with the origin's
// dedup key, and an expiry DedupExpiry ahead. Unknown chunks are 404. Xorbs that would take the
// answer past shard.MaxSize (which the client refuses) are left out.
//
// Single-chunk xorbs the token's scope does not hold (index.Index.Possessed) are left out:
// their hash is their chunk hash, so offering one would hand over the unkeyed chunk hash, and
// ingest would refuse a shard referencing it anyway (ingest.Service.checkPossession). The
// client then uploads those bytes itself, which records possession. An answer left with no
// xorb is the same 404 as an unknown chunk.
func (s *Server) dedup(w http.ResponseWriter, r *http.Request) error {
	switch p := r.PathValue("prefix"); p {
	case "default", "default-merkledb":
	default:
		return fmt.Errorf("%w: unknown prefix %q", httpapi.ErrBadRequest, p)
	}
	chunk, err := pathHash(r, "hash")
	if err != nil {
		return err
	}
	if s.absent != nil && s.absent.DedupAbsent(chunk) {
		s.noEntry.write(w)
		return nil
	}
	ctx := r.Context()
	xs, err := s.idx.DedupXorbs(ctx, chunk)
	if errors.Is(err, index.ErrNotFound) {
		s.noEntry.write(w)
		return nil
	} else if err != nil {
		return err
	}
	layouts, err := s.idx.Layouts(ctx, xs)
	if err != nil {
		return err
	}
	var single []hash.Hash
	for _, xh := range xs {
		if l, ok := layouts[xh]; ok && l.NumChunks() == 1 {
			single = append(single, xh)
		}
	}
	held := map[hash.Hash]bool{}
	if len(single) > 0 {
		if held, err = s.idx.Possessed(ctx, claims(ctx).Scope, single); err != nil {
			return err
		}
	}
	blocks := make([]shard.Xorb, 0, len(xs))
	// header, the file section's bookend, the xorb section's bookend, footer
	size := shard.HeaderSize + 2*shard.RecordSize + shard.FooterSize
	for _, xh := range xs {
		l, ok := layouts[xh]
		if !ok {
			return fmt.Errorf("dedup entry %s names xorb %s without a layout", chunk, xh)
		}
		if l.NumChunks() == 1 && !held[xh] {
			continue
		}
		n := (1 + l.NumChunks()) * shard.RecordSize
		if size+n > shard.MaxSize {
			continue
		}
		size += n
		x := shard.Xorb{Hash: xh, RawBytes: l.RawLen(), Chunks: make([]shard.XorbChunk, l.NumChunks())}
		var start uint32
		for j, ch := range l.ChunkHashes {
			x.Chunks[j] = shard.XorbChunk{Hash: ch, RawStart: start, RawLen: l.RawEnds[j] - start}
			if ch == chunk {
				x.Chunks[j].Flags = shard.ChunkFlagGlobalDedup // let the client chain queries
			}
			start = l.RawEnds[j]
		}
		blocks = append(blocks, x)
	}
	if len(blocks) == 0 {
		return noDedupEntry(chunk)
	}
	now := s.now()
	ans := shard.DedupAnswer(blocks, s.keys.Dedup, now, now.Add(s.cfg.Auth.DedupExpiry.D()))
	b := ans.AppendWithFooter(nil)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(b)
	return err
}

// dedupMiss is the dedup route's 404, encoded once: the answer the error path would write for
// noDedupEntry (status, code, public text). Most dedup queries are misses (hf_xet asks once per
// uploaded file), and the error path's classification, logging call and JSON encoding were half
// of the handler's CPU (perf/BENCHMARKS.md, 2026-12-02 third pass). Such a miss is not logged
// (the error path logged it at debug level only); the request metrics count it as a 404.
type dedupMiss struct {
	status int
	body   []byte
}

func newDedupMiss(errs *httpapi.Errors) dedupMiss {
	err := noDedupEntry{}
	status, code := errs.Status(err)
	b, _ := json.Marshal(httpapi.ErrorBody{Error: httpapi.PublicMessage(status, err), Code: code})
	return dedupMiss{status: status, body: append(b, '\n')}
}

func (m dedupMiss) write(w http.ResponseWriter) { httpapi.WriteRawJSON(w, m.status, m.body) }

// noDedupEntry is the 404 of the dedup route, formatted only when its text is asked for (a
// 404 is logged at debug level only; hf_xet sends one query per uploaded file, most of them
// misses).
type noDedupEntry hash.Hash

func (e noDedupEntry) Error() string {
	return fmt.Sprintf("%v: no dedup entry for chunk %s", index.ErrNotFound, hash.Hash(e))
}

func (noDedupEntry) Unwrap() error { return index.ErrNotFound }
