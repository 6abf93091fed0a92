package datacache

import (
	"context"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// Receive buffers of fills. A fill reads the origin's answer into one buffer, verifies the
// chunks that are complete, writes them to its temp file and moves the incomplete tail to the
// front, so one buffer must hold the largest chunk of its segment plus one read's worth.
// Readers read verified bytes from the file (the page cache), never from the buffer, so a
// buffer is held only while its fill runs, not while slow clients read.
const (
	// bufferBytes is the size of a pooled receive buffer.
	bufferBytes = 512 << 10
	// DefaultBufferMemory is the default ceiling of the receive buffers of all fills together
	// (Options.BufferMemory): 64 fills at once.
	DefaultBufferMemory = 32 << 20
)

// pool hands out receive buffers under a ceiling in bytes. Buffers of bufferBytes are reused
// (sync.Pool: the runtime drops unused ones over two collections, so memory goes back after a
// burst); larger ones, for segments with very large chunks, are allocated and dropped.
type pool struct {
	ceiling int64
	sem     *semaphore.Weighted
	inUse   atomic.Int64
	free    sync.Pool // *[]byte of cap bufferBytes
}

func newPool(ceiling int64) *pool {
	return &pool{ceiling: ceiling, sem: semaphore.NewWeighted(ceiling)}
}

// get returns a buffer of at least n bytes, waiting (bounded by ctx) while the ceiling is
// reached. A request larger than the ceiling takes the whole ceiling.
func (p *pool) get(ctx context.Context, n int) ([]byte, error) {
	size := max(n, bufferBytes)
	w := min(int64(size), p.ceiling)
	if err := p.sem.Acquire(ctx, w); err != nil {
		return nil, err
	}
	p.inUse.Add(int64(size))
	if size == bufferBytes {
		if b, ok := p.free.Get().(*[]byte); ok {
			return (*b)[:size], nil
		}
	}
	return make([]byte, size), nil
}

// put returns b, which get returned, to the pool.
func (p *pool) put(b []byte) {
	size := cap(b)
	p.inUse.Add(-int64(size))
	p.sem.Release(min(int64(size), p.ceiling))
	if size == bufferBytes {
		b = b[:size]
		p.free.Put(&b)
	}
}
