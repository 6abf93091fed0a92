package server

import (
	"context"
	"fmt"
	"io"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Fetcher reads raw bytes [start, end) of a stored xorb object from the origin
// (*originapi.Client).
type Fetcher interface {
	FetchXorbRange(ctx context.Context, h hash.Hash, start, end int64) (io.ReadCloser, error)
}

// Passthrough is an XorbBytes without a cache: every read goes to the origin and is verified
// chunk by chunk before it is returned. The edge uses it when no data cache is configured.
type Passthrough struct {
	Fetcher Fetcher
}

// ReadBytes implements XorbBytes. Errors wrap ErrBadRange, ErrCorrupt or the fetcher's.
func (p Passthrough) ReadBytes(ctx context.Context, l *xorb.Layout, start, end int64) ([]byte, error) {
	a, b, err := chunkSpan(l, start, end)
	if err != nil {
		return nil, err
	}
	rc, err := p.Fetcher.FetchXorbRange(ctx, l.Hash, start, end)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	buf := make([]byte, end-start)
	if _, err := io.ReadFull(rc, buf); err != nil {
		return nil, fmt.Errorf("xorb %s bytes [%d,%d): %w", l.Hash, start, end, err)
	}
	if err := xorb.VerifyRange(buf, l, a, b); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return buf, nil
}

// chunkSpan returns the chunks [a, b) whose serialized bytes are exactly [start, end).
func chunkSpan(l *xorb.Layout, start, end int64) (a, b uint32, err error) {
	n := l.NumChunks()
	if start < 0 || end <= start || end > int64(l.ChunkAreaLen()) {
		return 0, 0, fmt.Errorf("%w: [%d,%d) of xorb %s with %d chunk bytes", ErrBadRange, start, end, l.Hash, l.ChunkAreaLen())
	}
	i := firstEndAbove(l, start) // chunk holding byte start
	j := firstEndAbove(l, end-1) // chunk holding byte end-1
	cs, _ := l.ByteRange(uint32(i), uint32(i)+1)
	if int64(cs) != start || int64(l.StoredEnds[j]) != end || j >= n {
		return 0, 0, fmt.Errorf("%w: [%d,%d) of xorb %s", ErrBadRange, start, end, l.Hash)
	}
	return uint32(i), uint32(j) + 1, nil
}

// firstEndAbove is the index of the chunk holding stored byte off (off < ChunkAreaLen).
func firstEndAbove(l *xorb.Layout, off int64) int {
	lo, hi := 0, l.NumChunks()
	for lo < hi {
		m := (lo + hi) / 2
		if int64(l.StoredEnds[m]) > off {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}
