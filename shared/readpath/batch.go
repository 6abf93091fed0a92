package readpath

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/httpserver"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// BatchOptions configure the batch reconstruction route. A batch costs one record lookup per
// file and an answer about the size of its terms, so both are bounded; clients with bigger
// needs ask per file.
// Default batch limits (both tiers' limits.batch_files, batch_terms, batch_body). The terms bound
// keeps answers under ~60 MiB (~100 B of JSON and at most one ~350 B fetch entry per term); the
// body bound fits 1,000 {"prefix":"default","hash":"…"} entries (~86 KB).
const (
	DefaultBatchFiles = 1000
	DefaultBatchTerms = 1 << 17
	DefaultBatchBody  = 256 << 10
)

type BatchOptions struct {
	Files int   // file ids per request (more: 413)
	Terms int   // terms summed over the distinct files (more: 413)
	Body  int64 // bytes of a POST body
	// Pace is the POST body's pace floor (httpapi.ReadBody).
	Pace httpapi.PaceOptions
	// Prefix is the only prefix a POST body's entries may name; others are ErrBadPrefix.
	Prefix       string
	ErrBadPrefix error
	// Bound (nil: none) runs all the batch's lookups, so a tier can bound them together: what
	// names them for the error.
	Bound func(ctx context.Context, what string, call func(context.Context) error) error
}

// batchKey is one element of a POST body: {"prefix":"default","hash":"<64 hex>"}.
type batchKey struct {
	Prefix *string `json:"prefix"`
	Hash   *string `json:"hash"`
}

// ParseQuery reads the repeated file_id parameters of GET /v1/reconstructions
// ([client]/[ref-server] form). Other parameters are ignored. It returns the distinct ids in
// first-appearance order; errors wrap httpapi.ErrBadRequest, hash.ErrSyntax or (more than
// o.Files ids) httpapi.ErrTooLarge.
func (o BatchOptions) ParseQuery(rawQuery string) ([]hash.Hash, error) {
	maxFiles := o.Files
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: batch query: %v", httpapi.ErrBadRequest, err)
	}
	ids := q["file_id"]
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: batch names no file (want file_id=<hash>&file_id=…)", httpapi.ErrBadRequest)
	}
	if len(ids) > maxFiles {
		return nil, fmt.Errorf("%w: batch names %d files, limit %d", httpapi.ErrTooLarge, len(ids), maxFiles)
	}
	out := make([]hash.Hash, 0, len(ids))
	for i, s := range ids {
		h, err := hash.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("file_id %d: %w", i, err)
		}
		out = append(out, h)
	}
	return Distinct(out), nil
}

// ParseBody reads the body of POST /v1/reconstructions: the [spec] form, a JSON array of
// {"prefix":"default","hash":"<hex>"}, or the upstream request type's form, an object
// {"file_ids":[…]} of the same elements. Both fields are required and the prefix must be
// o.Prefix. It returns the distinct ids in first-appearance order; errors wrap
// httpapi.ErrBadRequest, hash.ErrSyntax, o.ErrBadPrefix or httpapi.ErrTooLarge.
func (o BatchOptions) ParseBody(body []byte) ([]hash.Hash, error) {
	maxFiles := o.Files
	var keys []batchKey
	var err error
	switch t := bytes.TrimLeft(body, " \t\r\n"); {
	case len(t) > 0 && t[0] == '[':
		err = json.Unmarshal(body, &keys)
	case len(t) > 0 && t[0] == '{':
		var obj struct {
			FileIDs []batchKey `json:"file_ids"`
		}
		err = json.Unmarshal(body, &obj)
		keys = obj.FileIDs
	default:
		return nil, fmt.Errorf("%w: batch body is not a JSON array of {\"prefix\",\"hash\"}", httpapi.ErrBadRequest)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: batch body: %v", httpapi.ErrBadRequest, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: batch names no file", httpapi.ErrBadRequest)
	}
	if len(keys) > maxFiles {
		return nil, fmt.Errorf("%w: batch names %d files, limit %d", httpapi.ErrTooLarge, len(keys), maxFiles)
	}
	out := make([]hash.Hash, 0, len(keys))
	for i, k := range keys {
		if k.Prefix == nil || k.Hash == nil {
			return nil, fmt.Errorf("%w: batch entry %d: want {\"prefix\":\"default\",\"hash\":\"<hex>\"}", httpapi.ErrBadRequest, i)
		}
		if *k.Prefix != o.Prefix {
			return nil, fmt.Errorf("%w: batch entry %d: %q", o.ErrBadPrefix, i, *k.Prefix)
		}
		h, err := hash.Parse(*k.Hash)
		if err != nil {
			return nil, fmt.Errorf("batch entry %d: %w", i, err)
		}
		out = append(out, h)
	}
	return Distinct(out), nil
}

// Distinct removes repeated hashes in place, keeping first appearances in order.
func Distinct(hs []hash.Hash) []hash.Hash {
	seen := make(map[hash.Hash]struct{}, len(hs))
	out := hs[:0]
	for _, h := range hs {
		if _, ok := seen[h]; !ok {
			seen[h] = struct{}{}
			out = append(out, h)
		}
	}
	return out
}

// Batch serves GET /v1/reconstructions?file_id=…&file_id=… and POST /v1/reconstructions with a
// JSON body (docs/protocol.md §2.9). The answer is the v1 batch shape,
//
//	{"files":{F:[term,…],…},"fetch_info":{H:[{"range":…,"url":U,"url_range":…},…],…}}
//
// with whole-file terms exactly as GET /v1/reconstructions/{file} gives them and, per xorb,
// the union of the files' v1 fetch entries (identical entries once, sorted by chunk range), so
// every term is covered. Every file must be visible in the token's scope, or the whole request
// is 404, the same answer as for a file that does not exist. Repeated ids are answered once.
// URLs carry the signer's exact expiry.
func (h *Handlers) Batch(o BatchOptions) httpserver.Handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		start := time.Now()
		ctx := r.Context()
		var ids []hash.Hash
		if r.Method == http.MethodPost {
			body, err := httpapi.ReadBody(w, r, httpapi.BodyOptions{Limit: o.Body, Pace: o.Pace})
			if err != nil {
				return err
			}
			if ids, err = o.ParseBody(body); err != nil {
				return err
			}
		} else {
			var err error
			if ids, err = o.ParseQuery(r.URL.RawQuery); err != nil {
				return err
			}
		}
		var answers []*recon.Answer
		plan := func(ctx context.Context) error {
			var err error
			answers, err = h.batchPlans(ctx, ids, o.Terms)
			return err
		}
		var err error
		if o.Bound != nil {
			err = o.Bound(ctx, fmt.Sprintf("the index (a batch of %d files)", len(ids)), plan)
		} else {
			err = plan(ctx)
		}
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		scope := httpserver.Claims(ctx).Scope
		sign := h.o.Signer.Bind(scope, hash.Zero, h.o.Signer.Expiry(0))
		err = WriteBatch(w, ids, answers, sign)
		if h.o.Recon != nil {
			h.o.Recon.WithLabelValues("batch").Observe(time.Since(start).Seconds())
		}
		return err
	}
}

// batchPlans looks up every file in the token's scope and plans its whole-file answer. It
// stops with a 413 error once the files' terms add up to more than maxTerms, so at most one
// record beyond the limit is held.
func (h *Handlers) batchPlans(ctx context.Context, ids []hash.Hash, maxTerms int) ([]*recon.Answer, error) {
	scope := httpserver.Claims(ctx).Scope
	layout := func(x hash.Hash) (*xorb.Layout, error) { return h.o.Source.Layout(ctx, x) }
	answers := make([]*recon.Answer, 0, len(ids))
	terms := 0
	for _, id := range ids {
		rec := h.empty // the empty file exists in every scope, as on the single routes
		if !id.IsZero() {
			var err error
			if rec, err = h.o.Source.File(ctx, id, scope); err != nil {
				return nil, err
			}
		}
		if terms += len(rec.Terms); terms > maxTerms {
			return nil, fmt.Errorf("%w: batch files have more than %d terms; ask for fewer files or per file",
				httpapi.ErrTooLarge, maxTerms)
		}
		a, err := recon.Plan(rec, nil, layout) // whole file: no layout is loaded
		if err != nil {
			return nil, err
		}
		answers = append(answers, a)
	}
	return answers, nil
}

// batchRange is one v1 fetch entry before signing: chunks [Start, End) stored at bytes, of
// the file ids[file] (the first file, in request order, whose answer has this entry).
type batchRange struct {
	chunks recon.ChunkRange
	bytes  recon.ByteRange
	file   int
}

func sameBatchRange(a, b batchRange) bool { return a.chunks == b.chunks && a.bytes == b.bytes }

func compareBatchRange(a, b batchRange) int {
	return cmp.Or(cmp.Compare(a.chunks.Start, b.chunks.Start), cmp.Compare(a.chunks.End, b.chunks.End),
		cmp.Compare(a.bytes.Start, b.bytes.Start), cmp.Compare(a.bytes.End, b.bytes.End))
}

// batchXorb is the union of the files' fetch entries of one xorb.
type batchXorb struct {
	hash   hash.Hash
	ranges []batchRange
}

// mergeFetches gathers the fetch ranges of answers per xorb, xorbs in first-appearance order,
// each xorb's ranges sorted with duplicates removed; an entry several files share keeps the
// first of them (answers[i] is the answer of file i).
func mergeFetches(answers []*recon.Answer) []batchXorb {
	var xs []batchXorb
	at := map[hash.Hash]int{}
	for f, a := range answers {
		for _, xf := range a.Xorbs {
			i, ok := at[xf.Hash]
			if !ok {
				i = len(xs)
				at[xf.Hash] = i
				xs = append(xs, batchXorb{hash: xf.Hash})
			}
			for k := range xf.Chunks {
				xs[i].ranges = append(xs[i].ranges, batchRange{xf.Chunks[k], xf.Bytes[k], f})
			}
		}
	}
	for i := range xs {
		slices.SortStableFunc(xs[i].ranges, compareBatchRange) // stable: files in request order
		xs[i].ranges = slices.CompactFunc(xs[i].ranges, sameBatchRange)
	}
	return xs
}

// WriteBatch writes the batch answer of ids (answers[i] is the plan of ids[i]), signing one
// URL per fetch entry with sign, bound to the file the entry is of (sign.WithFile): an entry
// several files share is bound to the first of them in request order, whose visibility alone
// grants its bytes. Hiding that file revokes the entry; the batch as a whole is then 404 when
// asked again, as for any hidden file in it. Terms and fetch entries are encoded by recon
// exactly as in the single-file v1 answer. The answer is built in one buffer, handed to w
// whenever it passes batchFlushAt bytes.
func WriteBatch(w io.Writer, ids []hash.Hash, answers []*recon.Answer, sign urlsign.Bound) error {
	b := make([]byte, 0, batchFlushAt+4<<10)
	var err error
	flush := func() {
		if err == nil && len(b) >= batchFlushAt {
			_, err = w.Write(b)
			b = b[:0]
		}
	}
	b = append(b, `{"files":{`...)
	for i, a := range answers {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = ids[i].AppendString(b)
		b = append(b, `":[`...)
		for k := 0; k < a.Len() && err == nil; k += batchTermPiece {
			b = recon.AppendTerms(b, a, k, min(k+batchTermPiece, a.Len()))
			flush()
		}
		b = append(b, ']')
	}
	b = append(b, `},"fetch_info":{`...)
	var chunks []recon.ChunkRange // x's ranges split for recon.AppendFetchV1
	var stored []recon.ByteRange
	for i, x := range mergeFetches(answers) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = x.hash.AppendString(b)
		b = append(b, `":[`...)
		// Runs of entries of one file share a signer.
		for k := 0; k < len(x.ranges) && err == nil; {
			f := x.ranges[k].file
			chunks, stored = chunks[:0], stored[:0]
			hi := k
			for ; hi < len(x.ranges) && hi-k < batchFetchPiece && x.ranges[hi].file == f; hi++ {
				chunks, stored = append(chunks, x.ranges[hi].chunks), append(stored, x.ranges[hi].bytes)
			}
			if k > 0 {
				b = append(b, ',')
			}
			b = recon.AppendFetchV1(b, sign.WithFile(ids[f]), x.hash, chunks, stored)
			flush()
			k = hi
		}
		b = append(b, ']')
	}
	if err != nil {
		return err
	}
	b = append(b, "}}"...)
	_, err = w.Write(b)
	return err
}

const (
	// batchFlushAt is the buffered size at which WriteBatch hands bytes to its writer.
	batchFlushAt = 64 << 10
	// batchTermPiece and batchFetchPiece are the terms (~100 bytes each) and fetch entries
	// (~350 bytes each) encoded between flushes, so the buffer stays near batchFlushAt.
	batchTermPiece  = 256
	batchFetchPiece = 64
)
