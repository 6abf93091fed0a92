package chunk

import (
	"crypto/sha256"
	"errors"
	gohash "hash"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Chunk describes one chunk of a stream: its hash (docs/protocol.md §5.1) and length in bytes.
type Chunk struct {
	Hash hash.Hash
	Len  int
}

// Leaf returns the chunk as an input of the merkle aggregation (xorb and file hashes).
func (c Chunk) Leaf() hash.Leaf { return hash.Leaf{Hash: c.Hash, Size: uint64(c.Len)} }

// FileInfo summarises a whole stream.
type FileInfo struct {
	Size     int64
	SHA256   [sha256.Size]byte // the ordinary digest; hash.FromSHA256 gives the form shards carry
	FileHash hash.Hash         // docs/protocol.md §5.4; hash.Zero for an empty stream
}

// Hasher chunks a stream, hashes every chunk, and computes the SHA-256 and the file hash of
// the whole stream. It reads through a Reader, so its buffer memory is fixed; it also keeps the
// list of chunks (40 bytes per chunk, about 0.06% of the input) because the file hash needs it.
//
// The SHA-256 runs on other goroutines, overlapping with chunking and chunk hashing: one per
// large buffer fill, each waiting for the previous one, and each ending once its bytes are
// hashed, so a Hasher that is dropped half way leaks nothing. The Reader then alternates between
// two buffers. With GOMAXPROCS=1 the work is simply sequential.
//
// A Hasher is not safe for concurrent use.
type Hasher struct {
	r      *Reader
	ch     *hash.Chunker
	sha    shaTap
	chunks []Chunk
	size   int64
	err    error // sticky: io.EOF after the last chunk, or the first read error
}

// NewHasher returns a Hasher that reads from r.
func NewHasher(r io.Reader) *Hasher {
	h := &Hasher{r: NewReader(r), ch: hash.NewChunker(), sha: shaTap{h: sha256.New()}}
	h.r.tap = &h.sha
	return h
}

// Next returns the next chunk with its bytes; the bytes are valid until the next call of Next.
// After the last chunk it returns io.EOF, and then Info is complete. Errors of the underlying
// reader are returned as *ReadError, and every later call returns the same error.
func (h *Hasher) Next() (Chunk, []byte, error) {
	if h.err != nil {
		return Chunk{}, nil, h.err
	}
	data, err := h.r.Next()
	if err != nil {
		h.sha.wait()
		h.err = err
		return Chunk{}, nil, err
	}
	c := Chunk{Hash: h.ch.Sum(data), Len: len(data)}
	h.chunks = append(h.chunks, c)
	h.size += int64(len(data))
	return c, data, nil
}

// Chunks returns the chunks returned so far, in order. The caller must not modify the slice.
func (h *Hasher) Chunks() []Chunk { return h.chunks }

// Info returns the size, SHA-256 and file hash of the stream. It is meaningful only after Next
// has returned io.EOF; before that it returns ErrNotFinished.
func (h *Hasher) Info() (FileInfo, error) {
	if !errors.Is(h.err, io.EOF) {
		if h.err != nil {
			return FileInfo{}, h.err
		}
		return FileInfo{}, ErrNotFinished
	}
	info := FileInfo{Size: h.size, FileHash: hash.File(Leaves(h.chunks))}
	h.sha.h.Sum(info.SHA256[:0])
	return info, nil
}

// ErrNotFinished reports a call of Hasher.Info before the stream was read to its end.
var ErrNotFinished = errors.New("chunk: stream not read to the end")

// HashAll reads r to its end and returns its chunks and summary (see Hasher for the memory
// bound). Errors of r are returned as *ReadError.
//
// HashAll uses up to GOMAXPROCS goroutines: chunk hashes are independent, so after the gear
// scan has cut the chunks of one buffer fill, they are hashed in parallel, while the SHA-256 of
// the fill runs beside them. With GOMAXPROCS=1 it runs the same code sequentially. All
// goroutines have ended when HashAll returns.
func HashAll(r io.Reader) ([]Chunk, FileInfo, error) {
	workers := min(runtime.GOMAXPROCS(0), maxHashWorkers)
	sha := shaTap{h: sha256.New()}
	rd := newReaderSize(r, hashAllBufSize)
	rd.tap = &sha
	defer sha.wait() // also on error: leave no goroutine behind
	hashers := make([]*hash.Chunker, workers)
	for i := range hashers {
		hashers[i] = hash.NewChunker()
	}
	var (
		chunks []Chunk
		batch  [][]byte
		size   int64
	)
	for {
		batch = batch[:0]
		for {
			data, ok := rd.take()
			if !ok {
				break
			}
			batch = append(batch, data)
			size += int64(len(data))
		}
		chunks = hashBatch(chunks, batch, hashers)
		if rd.failed() {
			return nil, FileInfo{}, rd.err
		}
		if rd.err != nil { // io.EOF, and take has consumed every buffered byte
			break
		}
		rd.fill() // may wait for the SHA-256 of older fills before reusing a buffer
	}
	sha.wait()
	info := FileInfo{Size: size, FileHash: hash.File(Leaves(chunks))}
	sha.h.Sum(info.SHA256[:0])
	return chunks, info, nil
}

// maxHashWorkers bounds HashAll's parallelism; a few cores already outrun most disks.
const maxHashWorkers = 8

// hashAllBufSize is HashAll's read buffer: big fills give each parallel batch many chunks.
const hashAllBufSize = 4 << 20

// hashBatch appends the chunks of batch, in order, to dst, hashing them on len(hashers)
// goroutines (the caller's included) and returning when all are done.
func hashBatch(dst []Chunk, batch [][]byte, hashers []*hash.Chunker) []Chunk {
	base := len(dst)
	dst = slices.Grow(dst, len(batch))[:base+len(batch)]
	out := dst[base:]
	if len(hashers) == 1 || len(batch) < 2 {
		for i, b := range batch {
			out[i] = Chunk{Hash: hashers[0].Sum(b), Len: len(b)}
		}
		return dst
	}
	var next atomic.Int64 // index of the next chunk to hash
	work := func(c *hash.Chunker) {
		for {
			i := int(next.Add(1) - 1)
			if i >= len(batch) {
				return
			}
			out[i] = Chunk{Hash: c.Sum(batch[i]), Len: len(batch[i])}
		}
	}
	var wg sync.WaitGroup
	for _, c := range hashers[1:min(len(hashers), len(batch))] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(c)
		}()
	}
	work(hashers[0])
	wg.Wait()
	return dst
}

// Leaves converts chunks to merkle leaves, e.g. for hash.Merkle (xorb hash) or hash.File.
func Leaves(chunks []Chunk) []hash.Leaf {
	out := make([]hash.Leaf, len(chunks))
	for i, c := range chunks {
		out[i] = c.Leaf()
	}
	return out
}

// inlineSHA is the block size below which SHA-256 runs on the calling goroutine (after the
// blocks in flight): starting a goroutine is not worth it for little data.
const inlineSHA = 256 << 10

// shaTap feeds the raw stream into SHA-256 on other goroutines, one per observed block (large
// blocks only), each waiting for the previous one, so the blocks are hashed in order while the
// caller goes on. No goroutine outlives its block, so an abandoned Hasher leaks nothing.
type shaTap struct {
	h       gohash.Hash
	last    chan struct{} // closed when every observed block has been hashed; nil if none
	retired chan struct{} // the value of last at the previous retire
}

func (t *shaTap) observe(p []byte) {
	if len(p) < inlineSHA {
		t.wait()
		_, _ = t.h.Write(p) // hash.Hash.Write never fails
		return
	}
	prev, done := t.last, make(chan struct{})
	t.last = done
	go func() {
		if prev != nil {
			<-prev
		}
		_, _ = t.h.Write(p)
		close(done)
	}()
}

func (t *shaTap) retire() {
	if t.retired != nil {
		<-t.retired
	}
	t.retired = t.last
}

// wait returns once every observed block has been hashed.
func (t *shaTap) wait() {
	if t.last != nil {
		<-t.last
	}
}
