package xetclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// maxReconJSON bounds a reconstruction answer. A 256 MiB block lists a few thousand chunks; 64 MiB
// leaves room for blocks of several GiB.
const maxReconJSON = 64 << 20

// maxURLRefreshes bounds how often one fetch re-requests its reconstruction after a 403.
const maxURLRefreshes = 3

// maxFailovers bounds how often one fetch moves to another edge (failover.go).
const maxFailovers = 8

// DownloadOptions tune one Download call.
type DownloadOptions struct {
	// Range, when not nil, selects bytes Range[0] through Range[1] (inclusive, like an HTTP
	// Range). An end past the end of the file is clamped; a start at or past it is
	// ErrRangeNotSatisfiable.
	Range *[2]int64
	// Size is the file size when known (0: unknown). Known, it saves the final probe past EOF;
	// a file that turns out shorter, or (for a verified whole-file download) longer, is
	// ErrSizeMismatch.
	Size int64
	// Progress, when not nil, is called with the bytes written so far and the expected total:
	// from Size or Range, else from the reconstruction once a block ends before the block size
	// (at once for files up to Options.BlockSize); 0 while unknown. Calls are serialized but may
	// come from different goroutines.
	Progress func(done, total int64)
	// Stats, when not nil, is filled when Download returns (also after an error).
	Stats *DownloadStats
	// SkipVerify skips hashing a whole-file download. By default, when no Range is given, every
	// decoded chunk is hashed and the file hash rebuilt from them must equal file (ErrCorrupt
	// otherwise, reported after the bytes were written). Ranged downloads are checked only for
	// lengths: the protocol gives the client no hashes of partial content.
	SkipVerify bool
}

// DownloadStats describe a finished download.
type DownloadStats struct {
	// TransferBytes counts the bytes received from transfer URLs (compressed xorb ranges,
	// retries included): what crossed the network besides the reconstruction answers.
	TransferBytes int64
}

// Download writes the bytes of file (or of opts.Range) to w and returns how many it wrote.
//
// It walks the file in blocks of Options.BlockSize: per block one reconstruction request
// (GET /v2/reconstructions/{file} with a Range header, falling back to /v1 on 404 or 501),
// then one single-range GET per range descriptor on the signed transfer URLs, at most
// Options.Concurrency at a time across blocks. Every fetched range is decoded and checked: the
// number of chunks and bytes it holds, each chunk's decoded length, and each term's unpacked
// length. A 403 from a transfer URL re-requests the block's reconstruction and retries with the
// new URLs.
//
// Bytes are written with Write in order, from one goroutine at a time: the range at the output's
// frontier as its chunks are decoded, pieces that arrive early held in memory, at most about two
// blocks. DownloadAt avoids that buffering.
//
// Errors: ErrNotFound for an unknown file, ErrRangeNotSatisfiable, ErrSizeMismatch,
// *StatusError, ErrCorrupt, and errors of w.
func (c *Client) Download(ctx context.Context, file hash.Hash, w io.Writer, opts DownloadOptions) (int64, error) {
	return c.download(ctx, file, newSeqSink(w, c.opts.BlockSize), opts)
}

// DownloadAt is Download writing with WriteAt at offsets relative to the first byte downloaded
// (0 for a whole file), out of order and from several goroutines at once (an *os.File allows
// that). Nothing is buffered beyond the ranges being fetched.
func (c *Client) DownloadAt(ctx context.Context, file hash.Hash, w io.WriterAt, opts DownloadOptions) (int64, error) {
	return c.download(ctx, file, &atSink{w: w}, opts)
}

func (c *Client) download(ctx context.Context, file hash.Hash, out sink, opts DownloadOptions) (int64, error) {
	prog := &progress{fn: opts.Progress}
	if opts.Stats != nil {
		defer func() { opts.Stats.TransferBytes = prog.net.Load() }()
	}
	base, err := c.base(ctx)
	if err != nil {
		return 0, err
	}
	start, end := int64(0), int64(-1) // end exclusive; -1: unknown
	if r := opts.Range; r != nil {
		if r[0] < 0 || r[1] < r[0] {
			return 0, fmt.Errorf("xetclient: bad range %d-%d", r[0], r[1])
		}
		start, end = r[0], r[1]+1
		if r[1] == 1<<63-1 {
			end = -1
		}
	}
	if opts.Size > 0 {
		if start >= opts.Size {
			return 0, ErrRangeNotSatisfiable
		}
		if end < 0 || end > opts.Size {
			end = opts.Size
		}
	}
	if end >= 0 {
		prog.setTotal(end - start)
	}

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.opts.Concurrency)
	verify := opts.Range == nil && !opts.SkipVerify
	var blocks []*block
	pos := start
	var walkErr error
	for end < 0 || pos < end {
		want := c.opts.BlockSize
		if end >= 0 {
			want = min(want, end-pos)
		}
		b := &block{c: c, base: base, file: file, first: pos, last: pos + want - 1, verify: verify}
		n, err := b.plan(gctx, pos-start)
		if errors.Is(err, ErrRangeNotSatisfiable) && !(pos == start && opts.Range != nil) {
			prog.setTotal(pos - start)
			break // past EOF: the previous block ended exactly at the end of the file
		}
		if err != nil {
			walkErr = err
			break
		}
		if n < want {
			prog.setTotal(pos + n - start) // the file ends in this block
		}
		for _, j := range b.jobs {
			if err := out.wait(gctx, j.firstOut); err != nil {
				walkErr = err
				break
			}
			g.Go(func() error { return c.runJob(gctx, b, j, out, prog) })
		}
		blocks = append(blocks, b)
		pos += n
		if walkErr != nil || n < want {
			break
		}
	}
	if err := g.Wait(); err != nil {
		return prog.done(), err
	}
	if walkErr != nil {
		return prog.done(), walkErr
	}
	if opts.Size > 0 && pos < end {
		return prog.done(), fmt.Errorf("%w: file %s has %d bytes, not the %d given as its size", ErrSizeMismatch, file, pos, opts.Size)
	}
	if err := out.flush(); err != nil {
		return prog.done(), err
	}
	if verify {
		leaves := fileLeaves(blocks)
		var chunked int64
		for _, l := range leaves {
			chunked += int64(l.Size)
		}
		if got := hash.File(leaves); got != file || chunked != pos {
			// A Size shorter than the file cuts it (inside a chunk: the chunks hash right but hold
			// more than was written): the content is right, the size is not.
			if opts.Size > 0 {
				if _, err := c.reconstruct(ctx, base, file, opts.Size, opts.Size); err == nil {
					return prog.done(), fmt.Errorf("%w: file %s is longer than the %d bytes given as its size", ErrSizeMismatch, file, opts.Size)
				}
			}
			if got == file {
				return prog.done(), fmt.Errorf("%w: the file's chunks hold %d bytes, %d were written", ErrCorrupt, chunked, pos)
			}
			return prog.done(), fmt.Errorf("%w: downloaded content hashes to file %s, want %s", ErrCorrupt, got, file)
		}
	}
	return prog.done(), nil
}

// fileLeaves lists the chunks of a whole-file download in order. A block that starts inside a
// chunk (offset_into_first_range > 0) repeats the previous block's last chunk, which is dropped.
func fileLeaves(blocks []*block) []hash.Leaf {
	var leaves []hash.Leaf
	for i, b := range blocks {
		for k, t := range b.terms {
			l := t.leaves
			if i > 0 && k == 0 && b.ans.OffsetIntoFirstRange > 0 && len(l) > 0 {
				l = l[1:]
			}
			leaves = append(leaves, l...)
		}
	}
	return leaves
}

// block is one reconstruction call and the fetch jobs it gives.
type block struct {
	c           *Client
	base        string
	file        hash.Hash
	first, last int64 // requested closed range
	verify      bool  // hash the chunks of every term

	terms []termOut
	jobs  []*fetchJob

	mu  sync.Mutex
	gen int // bumped by every URL refresh
	ans *wire.QueryReconstructionResponseV2
}

// termOut places a term's bytes in the output.
type termOut struct {
	t    wire.Term
	skip uint64 // bytes dropped from the start of the term (offset_into_first_range)
	n    int64  // bytes written
	out  int64  // output offset of the first written byte
	// leaves are the term's chunks (hash and length) when the block verifies. The job owning the
	// term writes them; they are read after every job has finished.
	leaves []hash.Leaf
}

// fetchJob is one range descriptor to GET and the terms it serves.
type fetchJob struct {
	xorb     hash.Hash
	chunks   wire.ChunkRange
	bytes    wire.ByteRange
	url      string // from the first answer; see block.url for refreshed ones
	terms    []int
	firstOut int64
	// rawHint is the capacity fetchRange gives the decoded bytes up front: the larger of the
	// serialized range and its terms' unpacked bytes, at most what nc chunks can decode to.
	rawHint uint64
}

// plan asks for the reconstruction of the block and works out its terms and jobs. out0 is the
// output offset of the block's first byte. It returns the number of bytes the block yields,
// which is less than requested only at the end of the file.
func (b *block) plan(ctx context.Context, out0 int64) (int64, error) {
	ans, err := b.c.reconstruct(ctx, b.base, b.file, b.first, b.last)
	if err != nil {
		return 0, err
	}
	b.ans = ans
	want := b.last - b.first + 1
	// A job is identified by (xorb number, entry index, range index).
	jobIdx := make(map[[3]int]int)
	byXorb := make(map[hash.Hash]int)
	type termKey struct {
		job int
		r   wire.ChunkRange
	}
	counted := make(map[termKey]bool)
	var o int64
	skip := ans.OffsetIntoFirstRange
	for i, t := range ans.Terms {
		if o >= want {
			break
		}
		n := uint64(t.UnpackedLength)
		if uint64(t.Range.End-t.Range.Start) > xorb.MaxChunks || n > uint64(t.Range.End-t.Range.Start)*xorb.MaxChunkRaw {
			return 0, fmt.Errorf("%w: term %d: %d bytes in chunks [%d,%d)", ErrCorrupt, i, n, t.Range.Start, t.Range.End)
		}
		s := uint64(0)
		if i == 0 {
			s = skip
			if s >= n {
				return 0, fmt.Errorf("%w: offset_into_first_range %d >= first term length %d", ErrCorrupt, s, n)
			}
		}
		w := min(int64(n-s), want-o)
		e, r, ok := findRange(ans.Xorbs[t.Hash], t.Range)
		if !ok {
			return 0, fmt.Errorf("%w: no fetch entry for term %d", ErrCorrupt, i)
		}
		xi, ok := byXorb[t.Hash]
		if !ok {
			xi = len(byXorb)
			byXorb[t.Hash] = xi
		}
		key := [3]int{xi, e, r}
		ji, ok := jobIdx[key]
		if !ok {
			rd := ans.Xorbs[t.Hash][e].Ranges[r]
			nc := uint64(rd.Chunks.End - rd.Chunks.Start)
			if nc > xorb.MaxChunks || rd.Bytes.End-rd.Bytes.Start+1 > nc*(xorb.MaxChunkBytes+xorb.HeaderSize) {
				return 0, fmt.Errorf("%w: xorb %s range %d-%d cannot hold chunks [%d,%d)", ErrCorrupt,
					t.Hash, rd.Bytes.Start, rd.Bytes.End, rd.Chunks.Start, rd.Chunks.End)
			}
			ji = len(b.jobs)
			jobIdx[key] = ji
			b.jobs = append(b.jobs, &fetchJob{xorb: t.Hash, chunks: rd.Chunks, bytes: rd.Bytes,
				url: ans.Xorbs[t.Hash][e].URL, firstOut: out0 + o})
		}
		b.jobs[ji].terms = append(b.jobs[ji].terms, len(b.terms))
		if tk := (termKey{ji, t.Range}); !counted[tk] {
			// A file repeating itself (zero pages: one chunk, many terms) names the same chunks
			// again; they are fetched once.
			counted[tk] = true
			b.jobs[ji].rawHint += n
		}
		b.terms = append(b.terms, termOut{t: t, skip: s, n: w, out: out0 + o})
		o += w
	}
	for _, j := range b.jobs {
		// Terms of one job may still overlap: bounded by the most its chunks can hold.
		nc := uint64(j.chunks.End - j.chunks.Start)
		j.rawHint = min(max(j.rawHint, j.bytes.End-j.bytes.Start+1), nc*xorb.MaxChunkRaw)
	}
	return o, nil
}

// findRange returns the entry and range index of the first descriptor covering c.
func findRange(entries []wire.MultiRangeFetch, c wire.ChunkRange) (int, int, bool) {
	for i, e := range entries {
		for k, rd := range e.Ranges {
			if rd.Chunks.Start <= c.Start && c.End <= rd.Chunks.End {
				return i, k, true
			}
		}
	}
	return 0, 0, false
}

// url returns the current URL for j and the generation it belongs to.
func (b *block) url(j *fetchJob) (string, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gen == 0 {
		return j.url, 0
	}
	for _, e := range b.ans.Xorbs[j.xorb] {
		for _, rd := range e.Ranges {
			if rd.Chunks == j.chunks && rd.Bytes == j.bytes {
				return e.URL, b.gen
			}
		}
	}
	return j.url, b.gen
}

// refresh re-requests the block's reconstruction after a 403 on a URL of generation gen. Several
// jobs failing together cause one request. The new answer must have the same terms: only URLs
// may change (docs/protocol.md §2.10).
func (b *block) refresh(ctx context.Context, gen int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gen != gen {
		return nil
	}
	ans, err := b.c.reconstruct(ctx, b.base, b.file, b.first, b.last)
	if err != nil {
		return fmt.Errorf("refresh transfer URLs: %w", err)
	}
	if ans.OffsetIntoFirstRange != b.ans.OffsetIntoFirstRange || len(ans.Terms) != len(b.ans.Terms) {
		return fmt.Errorf("%w: refreshed reconstruction differs", ErrCorrupt)
	}
	for i := range ans.Terms {
		if ans.Terms[i] != b.ans.Terms[i] {
			return fmt.Errorf("%w: refreshed reconstruction differs at term %d", ErrCorrupt, i)
		}
	}
	b.ans = ans
	b.gen++
	return nil
}

// outRun is one run of output bytes [out, out+n) a job's terms fill from one run of its decoded
// bytes, starting skip bytes into chunk first (counted from the job's first chunk).
type outRun struct {
	first uint32
	skip  uint64
	out   int64
	n     int64
}

// start is the offset of the run in the decoded bytes, once the chunks before it are decoded.
func (r outRun) start(ends []uint32) (uint64, bool) {
	if r.first == 0 {
		return r.skip, true
	}
	if uint32(len(ends)) < r.first {
		return 0, false
	}
	return uint64(ends[r.first-1]) + r.skip, true
}

// streamRun reports whether j's terms, in output order, are one run: each after the previous
// one in the output and in the xorb's chunks, only the first cut at its start and only the last
// at its end. The usual job is (one term over its whole range); a file that repeats chunks is
// not, and is written once its range is in.
func streamRun(b *block, j *fetchJob) (outRun, bool) {
	if len(j.terms) == 0 {
		return outRun{}, false
	}
	t0 := &b.terms[j.terms[0]]
	r := outRun{first: t0.t.Range.Start - j.chunks.Start, skip: t0.skip, out: t0.out}
	for k, ti := range j.terms {
		t := &b.terms[ti]
		if k > 0 {
			prev := &b.terms[j.terms[k-1]]
			if t.skip != 0 || t.out != r.out+r.n || t.t.Range.Start != prev.t.Range.End ||
				uint64(prev.n)+prev.skip != uint64(prev.t.UnpackedLength) {
				return outRun{}, false
			}
		}
		r.n += t.n
	}
	return r, true
}

// runJob fetches and decodes one range and writes the terms it serves.
func (c *Client) runJob(ctx context.Context, b *block, j *fetchJob, out sink, prog *progress) error {
	refreshes, failovers := 0, 0
	// data and ends keep the whole chunks decoded so far across attempts, and got counts their
	// serialized bytes: a retry, a refreshed URL or another edge after a failover asks only for
	// the rest of the range (an attempt cut mid-body costs at most the chunk it was in).
	var data []byte
	var ends []uint32
	var got uint64
	// An in-order sink at this job's first byte takes its bytes as they are decoded, not once the
	// whole range (up to a 64 MiB xorb) is in: the first byte of `xet download -o -` then waits
	// for one chunk, not one range. Written bytes cannot be taken back, so once some were, a
	// range that must start over, or terms that do not add up, end the download (ErrCorrupt)
	// instead of being retried.
	run, streams := streamRun(b, j)
	var sent int64
	onChunk := func(data []byte, ends []uint32) error {
		if !streams {
			return nil
		}
		lo, ok := run.start(ends)
		if !ok {
			return nil
		}
		avail := min(int64(len(data))-int64(lo), run.n)
		if avail <= sent {
			return nil
		}
		n, err := out.putEarly(run.out+sent, data[lo+uint64(sent):lo+uint64(avail)])
		sent += int64(n)
		return err
	}
	err := c.retry(ctx, func(ctx context.Context) error {
		for {
			u, gen := b.url(j)
			var err error
			data, ends, got, err = c.fetchRange(ctx, u, j, data, ends, got, &prog.net, onChunk)
			if se := (*sinkError)(nil); errors.As(err, &se) {
				return se.err
			}
			if sent > 0 {
				if lo, ok := run.start(ends); !ok || uint64(len(data)) < lo+uint64(sent) {
					return fmt.Errorf("%w: range restarted after %d of its bytes were written (%v)", ErrCorrupt, sent, err)
				}
			}
			if isStatus(err, http.StatusForbidden) && refreshes < maxURLRefreshes {
				refreshes++
				if rerr := b.refresh(ctx, gen); rerr != nil {
					return rerr
				}
				continue
			}
			if err != nil && c.failoverMode() && edgeGone(err) && failovers < maxFailovers {
				// failover.go: the edge behind u stopped answering; ask the token route for
				// another and take this block's URLs from it. A refresh that fails (the route
				// still names the dead edge) is retried after the policy's backoff.
				failovers++
				c.failover(ctx, u, err)
				if rerr := b.refresh(ctx, gen); rerr != nil {
					return transient(rerr)
				}
				continue
			}
			if err != nil {
				return err
			}
			err = checkTerms(b, j, ends)
			if err != nil && sent > 0 {
				return errors.Unwrap(err) // not transient: bytes of it are out
			}
			return err
		}
	})
	if err != nil {
		return fmt.Errorf("fetch xorb %s chunks [%d,%d): %w", j.xorb, j.chunks.Start, j.chunks.End, err)
	}
	if b.verify {
		hashLeaves(b, j, data, ends)
	}
	if streams {
		lo, _ := run.start(ends)
		if err := out.put(run.out+sent, data[lo+uint64(sent):lo+uint64(run.n)]); err != nil {
			return err
		}
		prog.add(run.n)
		return nil
	}
	for _, ti := range j.terms {
		t := &b.terms[ti]
		lo := uint64(0)
		if a := t.t.Range.Start - j.chunks.Start; a > 0 {
			lo = uint64(ends[a-1])
		}
		lo += t.skip
		if err := out.put(t.out, data[lo:lo+uint64(t.n)]); err != nil {
			return err
		}
		prog.add(t.n)
	}
	return nil
}

// hashLeaves records the hashed chunks of each term of j.
func hashLeaves(b *block, j *fetchJob, data []byte, ends []uint32) {
	hc := hash.NewChunker()
	for _, ti := range j.terms {
		t := &b.terms[ti]
		t.leaves = make([]hash.Leaf, 0, t.t.Range.End-t.t.Range.Start)
		for c := t.t.Range.Start - j.chunks.Start; c < t.t.Range.End-j.chunks.Start; c++ {
			lo := uint32(0)
			if c > 0 {
				lo = ends[c-1]
			}
			t.leaves = append(t.leaves, hash.Leaf{Hash: hc.Sum(data[lo:ends[c]]), Size: uint64(ends[c] - lo)})
		}
	}
}

// checkTerms verifies that each term of j has the unpacked length the answer announced.
func checkTerms(b *block, j *fetchJob, ends []uint32) error {
	for _, ti := range j.terms {
		t := b.terms[ti].t
		a, e := t.Range.Start-j.chunks.Start, t.Range.End-j.chunks.Start
		lo := uint32(0)
		if a > 0 {
			lo = ends[a-1]
		}
		if got := ends[e-1] - lo; got != t.UnpackedLength {
			return transient(fmt.Errorf("%w: term of xorb %s chunks [%d,%d) decodes to %d bytes, answer says %d",
				ErrCorrupt, t.Hash, t.Range.Start, t.Range.End, got, t.UnpackedLength))
		}
	}
	return nil
}

// fetchRange GETs the serialized chunks of j from u (no Authorization) from byte got of the range
// on and decodes them onto data; ends receives each chunk's cumulative decoded end. It returns
// the whole chunks decoded so far and their serialized length, also on error, so the caller's
// next attempt resumes after them. Short or undecodable bodies are transient errors; an answer
// that does not fit the range drops what was kept (the next attempt starts over). onChunk, when
// not nil, sees the decoded bytes after each chunk; its error ends the fetch.
func (c *Client) fetchRange(ctx context.Context, u string, j *fetchJob, data []byte, ends []uint32, got uint64, net *atomic.Int64, onChunk func([]byte, []uint32) error) ([]byte, []uint32, uint64, error) {
	req, err := c.newRequest(ctx, http.MethodGet, u, false)
	if err != nil {
		return data, ends, got, err
	}
	start := j.bytes.Start + got
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", start, j.bytes.End))
	resp, err := c.send(req)
	if err != nil {
		return data, ends, got, err
	}
	defer resp.Body.Close()
	want := int64(j.bytes.End - start + 1)
	switch resp.StatusCode {
	case http.StatusPartialContent:
		if cr := resp.Header.Get("Content-Range"); cr != "" && !strings.HasPrefix(cr,
			"bytes "+strconv.FormatUint(start, 10)+"-"+strconv.FormatUint(j.bytes.End, 10)+"/") {
			return data, ends, got, fmt.Errorf("%w: asked bytes %d-%d, got Content-Range %q", ErrCorrupt, start, j.bytes.End, cr)
		}
	case http.StatusOK:
		if resp.ContentLength >= 0 && resp.ContentLength != want {
			return data, ends, got, fmt.Errorf("%w: asked %d bytes, server sent %d (Range ignored?)", ErrCorrupt, want, resp.ContentLength)
		}
	default:
		return data, ends, got, fmt.Errorf("%w: transfer answered %d", ErrCorrupt, resp.StatusCode)
	}
	nc := int(j.chunks.End - j.chunks.Start)
	if data == nil {
		// The whole range's room up front: grown by append, a 64 MiB range was copied about
		// twice more and faulted in fresh pages at every growth, a third of the client's CPU per
		// downloaded GiB (perf/BENCHMARKS.md, 2026-12-04, "xet download's own CPU").
		data = make([]byte, 0, j.rawHint)
	}
	cr := xorb.NewChunkReader(&countingReader{r: io.LimitReader(resp.Body, want), n: net})
	for {
		raw, _, err := cr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return data, ends, got, transient(fmt.Errorf("decode chunk %d: %w", len(ends), err))
		}
		if len(ends) == nc {
			return data[:0], ends[:0], 0, transient(fmt.Errorf("%w: more than %d chunks in range", ErrCorrupt, nc))
		}
		data = append(data, raw...)
		ends = append(ends, uint32(len(data)))
		got = start - j.bytes.Start + uint64(cr.Offset())
		if onChunk != nil {
			if err := onChunk(data, ends); err != nil {
				return data, ends, got, err
			}
		}
	}
	if len(ends) != nc || got != j.bytes.End-j.bytes.Start+1 {
		return data[:0], ends[:0], 0, transient(fmt.Errorf("%w: range holds %d chunks in %d bytes, want %d chunks in %d bytes",
			ErrCorrupt, len(ends), got, nc, j.bytes.End-j.bytes.Start+1))
	}
	return data, ends, got, nil
}

// reconstruct asks for the reconstruction of file bytes [first, last]: v2, or v1 after a 404 or
// 501 on v2 (remembered once v1 has answered).
func (c *Client) reconstruct(ctx context.Context, base string, file hash.Hash, first, last int64) (*wire.QueryReconstructionResponseV2, error) {
	if !c.v1Recon.Load() {
		ans, err := c.getRecon(ctx, base, "v2", file, first, last)
		if !isStatus(err, http.StatusNotFound, http.StatusNotImplemented) {
			return ans, reconErr(err)
		}
	}
	ans, err := c.getRecon(ctx, base, "v1", file, first, last)
	if err == nil {
		c.v1Recon.Store(true)
	}
	return ans, reconErr(err)
}

func reconErr(err error) error {
	switch {
	case err == nil:
		return nil
	case isStatus(err, http.StatusNotFound):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case isStatus(err, http.StatusRequestedRangeNotSatisfiable):
		return fmt.Errorf("%w: %w", ErrRangeNotSatisfiable, err)
	}
	return err
}

// getRecon is GET /{version}/reconstructions/{file} with Range: bytes=first-last, retried.
func (c *Client) getRecon(ctx context.Context, base, version string, file hash.Hash, first, last int64) (*wire.QueryReconstructionResponseV2, error) {
	var ans *wire.QueryReconstructionResponseV2
	err := c.retry(ctx, func(ctx context.Context) error {
		base := c.current(ctx, base) // failover.go: the token route's latest casUrl
		req, err := c.newRequest(ctx, http.MethodGet, base+"/"+version+"/reconstructions/"+file.String(), true)
		if err != nil {
			return err
		}
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", first, last))
		resp, err := c.send(req)
		if err != nil {
			c.failover(ctx, base, err)
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxReconJSON+1))
		if err != nil {
			return transient(err)
		}
		if len(body) > maxReconJSON {
			return fmt.Errorf("%w: reconstruction answer over %d bytes", ErrCorrupt, maxReconJSON)
		}
		if version == "v2" {
			ans, err = wire.DecodeV2(body)
		} else {
			ans, err = decodeV1(body)
		}
		// The stock client retries answers it cannot decode.
		return transient(err)
	})
	return ans, err
}

// decodeV1 decodes a v1 answer and converts it to v2 as the stock client does.
func decodeV1(body []byte) (*wire.QueryReconstructionResponseV2, error) {
	var probe struct {
		Offset    *uint64          `json:"offset_into_first_range"`
		Terms     *json.RawMessage `json:"terms"`
		FetchInfo *json.RawMessage `json:"fetch_info"`
	}
	if err := json.Unmarshal(body, &probe); err != nil {
		return nil, fmt.Errorf("%w: %w", wire.ErrShape, err)
	}
	if probe.Offset == nil || probe.Terms == nil || probe.FetchInfo == nil {
		return nil, fmt.Errorf("%w: offset_into_first_range, terms and fetch_info are required", wire.ErrShape)
	}
	var r wire.QueryReconstructionResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", wire.ErrShape, err)
	}
	if r.Terms == nil {
		r.Terms = []wire.Term{}
	}
	if r.FetchInfo == nil {
		r.FetchInfo = map[hash.Hash][]wire.FetchInfo{}
	}
	v2 := r.ToV2()
	if err := v2.Validate(); err != nil {
		return nil, err
	}
	return v2, nil
}

// progress serializes progress callbacks and counts transfer bytes.
type progress struct {
	fn    func(done, total int64)
	mu    sync.Mutex
	total int64
	n     int64
	net   atomic.Int64
}

// setTotal records the expected total once it is known, and reports it.
func (p *progress) setTotal(total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.total == total {
		return
	}
	p.total = total
	if p.fn != nil {
		p.fn(p.n, p.total)
	}
}

// countingReader adds the bytes read through it to n.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}

func (p *progress) add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += n
	if p.fn != nil {
		p.fn(p.n, p.total)
	}
}

func (p *progress) done() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// sink receives output pieces at their offsets.
type sink interface {
	// wait blocks until a piece at off may be produced without unbounded buffering.
	wait(ctx context.Context, off int64) error
	// put writes p at off; p is not retained after put returns unless the sink documents so.
	put(off int64, p []byte) error
	// putEarly writes p at off if the sink can take it now without holding it, and returns the
	// bytes it wrote (all of p or none); p is never retained. A job's later put starts where
	// its early bytes ended.
	putEarly(off int64, p []byte) (int, error)
	// flush reports pieces never written (a gap: a bug or a missing piece).
	flush() error
}

// atSink writes with WriteAt, in any order and concurrently.
type atSink struct{ w io.WriterAt }

func (s *atSink) wait(context.Context, int64) error { return nil }
func (s *atSink) put(off int64, p []byte) error {
	_, err := s.w.WriteAt(p, off)
	return err
}
func (s *atSink) flush() error { return nil }

// putEarly takes nothing: out-of-order writes gain nothing from early bytes.
func (s *atSink) putEarly(int64, []byte) (int, error) { return 0, nil }

// seqSink writes in order to an io.Writer, holding pieces that arrive before their turn (p is
// retained: the fetch buffers are not reused).
type seqSink struct {
	w      io.Writer
	window int64

	mu       sync.Mutex
	frontier int64
	pending  map[int64][]byte
	advanced chan struct{} // closed and replaced whenever frontier moves
}

func newSeqSink(w io.Writer, window int64) *seqSink {
	return &seqSink{w: w, window: window, pending: make(map[int64][]byte), advanced: make(chan struct{})}
}

func (s *seqSink) wait(ctx context.Context, off int64) error {
	s.mu.Lock()
	for off-s.frontier > s.window {
		ch := s.advanced
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
		s.mu.Lock()
	}
	s.mu.Unlock()
	return nil
}

func (s *seqSink) put(off int64, p []byte) error {
	if len(p) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if off != s.frontier {
		s.pending[off] = p
		return nil
	}
	return s.writeLocked(p)
}

// putEarly writes p when off is the frontier.
func (s *seqSink) putEarly(off int64, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if off != s.frontier {
		return 0, nil
	}
	if err := s.writeLocked(p); err != nil {
		return 0, &sinkError{err}
	}
	return len(p), nil
}

// sinkError is a write error of the output met while a range was being fetched: never retried.
type sinkError struct{ err error }

func (e *sinkError) Error() string { return e.err.Error() }
func (e *sinkError) Unwrap() error { return e.err }

// writeLocked writes p at the frontier, then every held piece it reaches, and wakes wait.
func (s *seqSink) writeLocked(p []byte) error {
	for {
		if _, err := s.w.Write(p); err != nil {
			return err
		}
		s.frontier += int64(len(p))
		var ok bool
		if p, ok = s.pending[s.frontier]; !ok {
			break
		}
		delete(s.pending, s.frontier)
	}
	close(s.advanced)
	s.advanced = make(chan struct{})
	return nil
}

func (s *seqSink) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) != 0 {
		return fmt.Errorf("xetclient: %d output pieces after byte %d were never reached", len(s.pending), s.frontier)
	}
	return nil
}
