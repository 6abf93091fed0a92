package chunk

import (
	"crypto/sha256"
	"errors"
	gohash "hash"
	"io"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Chunk describes one chunk of a stream: its hash (xet-protocol.md §5.1) and length in bytes.
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
	FileHash hash.Hash         // xet-protocol.md §5.4; hash.Zero for an empty stream
}

// Hasher chunks a stream, hashes every chunk, and computes the SHA-256 and the file hash of
// the whole stream. It reads through a Reader, so its buffer memory is fixed; it also keeps the
// list of chunks (40 bytes per chunk, about 0.06% of the input) because the file hash needs it.
//
// The SHA-256 runs on a second goroutine, overlapping with chunking and chunk hashing, one
// buffer fill at a time; no goroutine outlives the fill it was started for, so a Hasher that is
// dropped half way leaks nothing. With GOMAXPROCS=1 the work is simply sequential.
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

// HashAll reads r to its end and returns its chunks and summary (see Hasher).
func HashAll(r io.Reader) ([]Chunk, FileInfo, error) {
	h := NewHasher(r)
	for {
		if _, _, err := h.Next(); err != nil {
			if !errors.Is(err, io.EOF) {
				return nil, FileInfo{}, err
			}
			break
		}
	}
	info, err := h.Info()
	return h.chunks, info, err
}

// Leaves converts chunks to merkle leaves, e.g. for hash.Merkle (xorb hash) or hash.File.
func Leaves(chunks []Chunk) []hash.Leaf {
	out := make([]hash.Leaf, len(chunks))
	for i, c := range chunks {
		out[i] = c.Leaf()
	}
	return out
}

// inlineSHA is the block size below which SHA-256 runs on the calling goroutine: starting a
// goroutine is not worth it for little data.
const inlineSHA = 256 << 10

// shaTap feeds the raw stream into SHA-256, on another goroutine for large blocks.
type shaTap struct {
	h    gohash.Hash
	done chan struct{} // closed when the block in flight has been hashed; nil if none
}

func (t *shaTap) observe(p []byte) {
	t.wait()
	if len(p) < inlineSHA {
		_, _ = t.h.Write(p) // hash.Hash.Write never fails
		return
	}
	done := make(chan struct{})
	t.done = done
	go func() {
		_, _ = t.h.Write(p)
		close(done)
	}()
}

func (t *shaTap) wait() {
	if t.done != nil {
		<-t.done
		t.done = nil
	}
}
