package server

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/xetcdn/xetcdn/edge/internal/datacache"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/readpath"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// objectSize is the size of the stored xorb object l describes: chunk area, v1 footer and its
// u32 length (what the origin stores and Content-Range totals name).
func objectSize(l *xorb.Layout) uint64 {
	return uint64(l.ChunkAreaLen()) + uint64(xorb.FooterLen(l.NumChunks())) + 4
}

// The edge's transfer route is readpath.Handlers.Transfer over the edge's Source (source.go):
// the URL's file must be visible in its scope (metacache.Visible: 403 as soon as the edge has
// applied the origin's revocation event), the xorb's layout gives its size, and every byte
// comes from the data cache, which verified it against the layout (bytes that fail
// verification are never sent: 502). Without a Range header the signed ranges are served
// (readpath.SignedRanges). Over HTTP/1.1+TLS the body goes out in socket writes of batchBytes,
// read from the cache files copyBytes at a time (transferBatch), instead of one write(2) per
// 16 KiB TLS record and one read(2) per 32 KiB.

// transferBatch is the transfer route's readpath.Batcher.
func transferBatch(w http.ResponseWriter, r *http.Request) ([]byte, func() error) {
	b := beginBatch(w, r)
	return b.copyBuf(), b.end
}

// xorbObject is an open xorb of the edge's Source: its layout (from the metadata cache),
// bytes from the data cache.
type xorbObject struct {
	s *Server
	l *xorb.Layout
}

func (x xorbObject) Size() uint64 { return objectSize(x.l) }

func (x xorbObject) Open(ctx context.Context, b httprange.ByteRange) (readpath.Part, error) {
	return x.s.open(ctx, x.l, b)
}

// span is an open, verified byte range of a xorb: the chunk-aligned cached range rr, of which
// the requested bytes are n bytes after the first skip.
type span struct {
	rr      *datacache.Range
	skip, n int64
	// bc is the request's batching connection (nil: none); Send flushes it before waiting for
	// a fill.
	bc *batchConn
}

// Close releases the cached files; it is idempotent.
func (p *span) Close() error {
	if p.rr != nil {
		p.rr.Close()
		p.rr = nil
	}
	return nil
}

// open opens the stored bytes b of the xorb from the data cache, as the chunk-aligned range
// that covers them. Every byte of that range has been verified against l when open returns.
func (s *Server) open(ctx context.Context, l *xorb.Layout, b httprange.ByteRange) (*span, error) {
	if b.End >= uint64(l.ChunkAreaLen()) {
		return nil, fmt.Errorf("%w: bytes %s are outside the chunks of xorb %s", httprange.ErrUnsatisfiable, b, l.Hash)
	}
	i := firstEndAbove(l, int64(b.Start))
	j := firstEndAbove(l, int64(b.End))
	cs, ce := l.ByteRange(uint32(i), uint32(j)+1)
	rr, err := s.o.Bytes.ReadRange(ctx, l, int64(cs), int64(ce))
	if err != nil {
		if s.isCorrupt(err) {
			s.m.verifyFailures.Inc()
			s.log.ErrorContext(ctx, "origin sent corrupt xorb bytes", "xorb", l.Hash.String(), "err", err)
		}
		return nil, err
	}
	if rr.Len() != int64(ce-cs) {
		rr.Close()
		return nil, fmt.Errorf("%w: byte source offers %d bytes for [%d,%d)", ErrCorrupt, rr.Len(), cs, ce)
	}
	bc, _ := ctx.Value(batchKey{}).(*batchConn)
	return &span{rr: rr, skip: int64(b.Start - uint64(cs)), n: int64(b.Len()), bc: bc}, nil
}

// Send streams p's requested bytes to w (readpath.Part). With buf (a batching HTTP/1.1+TLS answer) it copies
// through buf, one read of the cache file per len(buf) bytes, and writes out what the batch
// gathered whenever the next bytes are still being filled (copyFlushing). Otherwise a chunk-aligned range
// (what the edge's own answers ask for) goes through the Range's WriteTo, which hands each
// cached file to w's ReadFrom: sendfile on plain-HTTP TCP, one pooled 32 KiB buffer on HTTP/2
// and HTTP/3. A short body means an I/O error after the header; the client sees the short
// Content-Length and retries.
func (p *span) Send(w io.Writer, buf []byte) (int64, error) {
	if p.skip > 0 {
		if _, err := p.rr.Discard(p.skip); err != nil {
			return 0, fmt.Errorf("skip %d cached bytes: %w", p.skip, err)
		}
	}
	var n int64
	var err error
	switch {
	case buf != nil:
		n, err = p.copyFlushing(w, buf)
	case p.rr.Len() == p.n:
		n, err = p.rr.WriteTo(w)
	default:
		n, err = io.Copy(w, io.LimitReader(p.rr, p.n))
	}
	if err == nil && n != p.n {
		err = fmt.Errorf("sent %d of %d bytes: %w", n, p.n, io.ErrUnexpectedEOF)
	}
	return n, err
}

// copyFlushing copies p's requested bytes to w through buf. Before a read that would wait for
// a fill it flushes w and the batching connection, so the client gets the verified bytes gathered
// so far instead of waiting for a full batch (on a cold fill: its first byte after one chunk,
// not after batchBytes of them).
func (p *span) copyFlushing(w io.Writer, buf []byte) (int64, error) {
	var n int64
	gathered := false
	for n < p.n {
		if gathered && !p.rr.Ready() {
			if err := p.flush(w); err != nil {
				return n, err
			}
			gathered = false
		}
		k, rerr := p.rr.Read(buf[:min(int64(len(buf)), p.n-n)])
		if k > 0 {
			wk, werr := w.Write(buf[:k])
			n += int64(wk)
			gathered = true
			if werr == nil && wk < k {
				werr = io.ErrShortWrite
			}
			if werr != nil {
				return n, werr
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return n, rerr
		}
	}
	return n, nil
}

// flush writes out what w (the answer's http.ResponseWriter) and the batching connection hold.
func (p *span) flush(w io.Writer) error {
	if rw, ok := w.(http.ResponseWriter); ok {
		if err := flushHTTP(rw); err != nil {
			return err
		}
	}
	if p.bc == nil {
		return nil
	}
	return p.bc.flush()
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
