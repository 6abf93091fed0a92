package xorb

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// ValidateOptions tune Validate. The zero value validates on the calling goroutine and does not
// compare the xorb hash with anything.
type ValidateOptions struct {
	// Expect, if not nil, is the hash the body must have (the hash in the upload URL);
	// a different recomputed hash is ErrHashMismatch.
	Expect *hash.Hash
	// Workers is how many goroutines decompress and hash chunks. 0 or 1 runs one pass on the
	// calling goroutine; n > 1 first walks the chunk headers (cheap) and then decompresses and
	// hashes chunks on up to n goroutines. Negative means runtime.GOMAXPROCS(0).
	Workers int
}

// Validate checks an uploaded xorb body in one pass (docs/protocol.md §7.4) and returns its layout
// and the length of its chunk area.
//
// It walks the chunk headers from offset 0, decompresses every chunk exactly once into a reused
// buffer, hashes it, and records its stored and raw end offsets. The walk ends at the end of the
// body or at a legacy footer (a header position starting with "XETBLOB"): such a footer, v1 or
// legacy v0, followed by its u32 length, must run exactly to the end of the body and agree with
// what was recomputed. Then the xorb hash is rebuilt from the chunk hashes.
//
// Errors wrap ErrCorrupt (bad header, truncated payload, failed decompression, wrong size,
// trailing bytes, bad or disagreeing footer), ErrEmpty (no chunk), ErrTooLarge (more than
// MaxChunks chunks or MaxRawBytes raw bytes) or ErrHashMismatch (hash differs from opts.Expect).
// Memory use is bounded by the body length and the limits, never by counts the body declares.
// The returned Layout does not alias body.
func Validate(body []byte, opts ValidateOptions) (*Layout, int, error) {
	workers := opts.Workers
	if workers < 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	var l *Layout
	var area int
	var err error
	if workers <= 1 {
		l, area, err = validateSerial(body)
	} else {
		l, area, err = validateParallel(body, workers)
	}
	if err != nil {
		return nil, 0, err
	}
	if area < len(body) {
		if err := checkUploadFooter(body[area:], l); err != nil {
			return nil, 0, err
		}
	}
	if opts.Expect != nil && *opts.Expect != l.Hash {
		return nil, 0, fmt.Errorf("%w: body hashes to %s, expected %s", ErrHashMismatch, l.Hash, *opts.Expect)
	}
	return l, area, nil
}

// initialChunks is the capacity the chunk slices start with: bounded by what the body can hold.
func initialChunks(bodyLen int) int {
	return min(bodyLen/HeaderSize+1, MaxChunks, 1024)
}

// withinLimits is the check a validator makes before it takes chunk h after chunks chunks of
// raw bytes: at most MaxChunks chunks and MaxRawBytes raw bytes in one xorb.
func withinLimits(h ChunkHeader, chunks int, raw uint64) error {
	if chunks >= MaxChunks {
		return fmt.Errorf("%w: more than %d chunks", ErrTooLarge, MaxChunks)
	}
	if raw+uint64(h.RawLen) > MaxRawBytes {
		return fmt.Errorf("%w: more than %d raw bytes", ErrTooLarge, MaxRawBytes)
	}
	return nil
}

// accept records a validated chunk in the layout a serial validator builds: chunk hash ch of
// header h, ending at stored offset end and raw offset raw. It returns leaves with the chunk's
// Merkle leaf appended.
func (l *Layout) accept(leaves []hash.Leaf, ch hash.Hash, h ChunkHeader, end int64, raw uint64) []hash.Leaf {
	l.ChunkHashes = append(l.ChunkHashes, ch)
	l.StoredEnds = append(l.StoredEnds, uint32(end))
	l.RawEnds = append(l.RawEnds, uint32(raw))
	return append(leaves, hash.Leaf{Hash: ch, Size: uint64(h.RawLen)})
}

// nextHeader parses the chunk header at body[pos:] for the walk over an upload. It returns
// done=true at the end of the body or at a footer. chunks and raw are the totals so far.
func nextHeader(body []byte, pos, chunks int, raw uint64) (h ChunkHeader, done bool, err error) {
	if pos == len(body) || IsFooter(body[pos:]) {
		return h, true, nil
	}
	h, err = ParseChunkHeader(body[pos:])
	if err != nil {
		return h, false, fmt.Errorf("chunk %d at offset %d: %w", chunks, pos, err)
	}
	if err := withinLimits(h, chunks, raw); err != nil {
		return h, false, err
	}
	if h.Size() > len(body)-pos {
		return h, false, fmt.Errorf("%w: chunk %d at offset %d: payload of %d bytes truncated to %d",
			ErrCorrupt, chunks, pos, h.CompressedLen, len(body)-pos-HeaderSize)
	}
	return h, false, nil
}

func validateSerial(body []byte) (*Layout, int, error) {
	c := initialChunks(len(body))
	l := &Layout{
		ChunkHashes: make([]hash.Hash, 0, c),
		StoredEnds:  make([]uint32, 0, c),
		RawEnds:     make([]uint32, 0, c),
	}
	var dec Decoder
	var scratch []byte // grows to the largest chunk, at most MaxChunkRaw
	leaves := make([]hash.Leaf, 0, c)
	pos, raw := 0, uint64(0)
	for {
		h, done, err := nextHeader(body, pos, len(leaves), raw)
		if err != nil {
			return nil, 0, err
		}
		if done {
			break
		}
		out, aliased, err := dec.chunkData(scratch[:0], h, body[pos+HeaderSize:pos+h.Size()])
		if err != nil {
			return nil, 0, fmt.Errorf("chunk %d at offset %d: %w", len(leaves), pos, err)
		}
		if !aliased {
			scratch = out
		}
		pos += h.Size()
		raw += uint64(h.RawLen)
		leaves = l.accept(leaves, hash.Chunk(out), h, int64(pos), raw)
	}
	if len(leaves) == 0 {
		return nil, 0, fmt.Errorf("%w: upload of %d bytes", ErrEmpty, len(body))
	}
	l.Hash = hash.Merkle(leaves)
	return l, pos, nil
}

// chunkBatch is how many chunks a worker claims at a time in validateParallel.
const chunkBatch = 4

func validateParallel(body []byte, workers int) (*Layout, int, error) {
	// Pass 1: headers only. This bounds every later allocation by what the body really holds.
	c := initialChunks(len(body))
	headers := make([]ChunkHeader, 0, c)
	stored := make([]uint32, 0, c)
	rawEnds := make([]uint32, 0, c)
	pos, raw := 0, uint64(0)
	for {
		h, done, err := nextHeader(body, pos, len(headers), raw)
		if err != nil {
			return nil, 0, err
		}
		if done {
			break
		}
		pos += h.Size()
		raw += uint64(h.RawLen)
		headers = append(headers, h)
		stored = append(stored, uint32(pos))
		rawEnds = append(rawEnds, uint32(raw))
	}
	n := len(headers)
	if n == 0 {
		return nil, 0, fmt.Errorf("%w: upload of %d bytes", ErrEmpty, len(body))
	}

	// Pass 2: decompress and hash; workers claim batches of chunks in order.
	hashes := make([]hash.Hash, n)
	errs := make([]error, n/chunkBatch+1) // one slot per batch, so the first failing chunk wins
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(workers, (n+chunkBatch-1)/chunkBatch) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dec Decoder
			var scratch []byte
			for !failed.Load() {
				b := int(next.Add(1) - 1)
				if b*chunkBatch >= n {
					return
				}
				for i := b * chunkBatch; i < min(n, (b+1)*chunkBatch); i++ {
					start := 0
					if i > 0 {
						start = int(stored[i-1])
					}
					h := headers[i]
					out, aliased, err := dec.chunkData(scratch[:0], h, body[start+HeaderSize:start+h.Size()])
					if err != nil {
						errs[b] = fmt.Errorf("chunk %d at offset %d: %w", i, start, err)
						failed.Store(true)
						return
					}
					if !aliased {
						scratch = out
					}
					hashes[i] = hash.Chunk(out)
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, 0, err
		}
	}
	leaves := make([]hash.Leaf, n)
	for i := range leaves {
		leaves[i] = hash.Leaf{Hash: hashes[i], Size: uint64(headers[i].RawLen)}
	}
	return &Layout{Hash: hash.Merkle(leaves), ChunkHashes: hashes, StoredEnds: stored, RawEnds: rawEnds}, pos, nil
}

// checkUploadFooter checks a footer sent with an upload (legacy clients) against the layout
// recomputed from the chunks. tail runs from the footer ident to the end of the body.
func checkUploadFooter(tail []byte, l *Layout) error {
	fl, used, err := parseFooterForward(tail)
	if err != nil {
		return fmt.Errorf("footer in upload: %w", err)
	}
	if used != len(tail) {
		return fmt.Errorf("%w: %d bytes after the footer", ErrCorrupt, len(tail)-used)
	}
	if fl.Hash != l.Hash || !slices.Equal(fl.ChunkHashes, l.ChunkHashes) || !slices.Equal(fl.StoredEnds, l.StoredEnds) ||
		(fl.RawEnds != nil && !slices.Equal(fl.RawEnds, l.RawEnds)) {
		return fmt.Errorf("%w: footer in upload disagrees with its chunks", ErrCorrupt)
	}
	return nil
}
