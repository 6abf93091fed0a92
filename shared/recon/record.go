// Package recon plans reconstruction answers (docs/protocol.md §9) and writes them in the v1 and
// v2 JSON shapes of §2.3.
//
// The index keeps one FileRecord per file: its terms with their stored byte ranges precomputed at
// registration (NewFileRecord). A whole-file answer therefore needs no xorb layout; a ranged one
// needs the layouts of at most the first and last emitted terms' xorbs, to trim chunks.
//
//	record (index / edge cache) --Plan(range, layout)--> *Answer --WriteV2/WriteV1(Signer)--> JSON
//
// The package does no I/O beyond the io.Writer it is handed and keeps no mutable package state.
package recon

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

var (
	// ErrRangeNotSatisfiable: the requested range starts at or past the end of the file (416).
	ErrRangeNotSatisfiable = errors.New("recon: range not satisfiable")
	// ErrCorrupt: a binary FileRecord is malformed or violates a record invariant.
	ErrCorrupt = errors.New("recon: corrupt file record")
	// ErrMissingXorb: NewFileRecord found no layout for a term's xorb.
	ErrMissingXorb = errors.New("recon: xorb not found")
	// ErrTermMismatch: a term disagrees with its xorb's layout (chunk range outside the xorb,
	// wrong unpacked size, or a precomputed byte range that the layout does not give).
	ErrTermMismatch = errors.New("recon: term does not match xorb layout")
)

// ByteRange is a closed byte range [Start, End] inside a stored xorb object.
type ByteRange = httprange.ByteRange

// Term is one term of a file record: chunks [Start, End) of Xorb, with their uncompressed size
// and the half-open byte range [ByteStart, ByteEnd) those chunks occupy in the stored object
// (8-byte chunk headers included, docs/protocol.md §7.3).
type Term struct {
	Xorb               hash.Hash
	Start, End         uint32
	RawBytes           uint32
	ByteStart, ByteEnd uint32
}

// FileRecord is everything needed to answer reconstructions of one file. Size is the sum of the
// terms' RawBytes; SHA256 (shard byte order, see hash.FromSHA256) may be nil. A FileRecord is
// immutable once built; share it freely.
//
// Records from NewFileRecord and UnmarshalFileRecord carry a precomputed term index (distinct
// xorbs as small integers, sampled file offsets; about 4 bytes per term) that makes Plan cheaper.
// A record assembled as a literal works the same, but Plan derives that index on every call.
type FileRecord struct {
	Hash   hash.Hash
	Size   uint64
	SHA256 *hash.Hash
	Terms  []Term

	ix *termIndex // nil, or the index of Terms (checked against Terms before use)
}

// NewFileRecord derives the record of a parsed shard file from the layouts of the xorbs it
// references (keyed by xorb hash). Every term must lie inside its xorb and its RawBytes must
// equal the layout's; otherwise the error wraps ErrMissingXorb or ErrTermMismatch.
func NewFileRecord(file shard.File, layouts map[hash.Hash]*xorb.Layout) (*FileRecord, error) {
	rec := &FileRecord{Hash: file.Hash, Terms: make([]Term, len(file.Terms))}
	if file.SHA256 != nil {
		s := *file.SHA256
		rec.SHA256 = &s
	}
	for i, t := range file.Terms {
		l := layouts[t.Xorb]
		if l == nil {
			return nil, fmt.Errorf("file %s term %d: %w: %s", file.Hash, i, ErrMissingXorb, t.Xorb)
		}
		if err := l.CheckRange(t.Start, t.End); err != nil {
			return nil, fmt.Errorf("file %s term %d: %w: %w", file.Hash, i, ErrTermMismatch, err)
		}
		if raw := l.RawRange(t.Start, t.End); raw != t.RawBytes {
			return nil, fmt.Errorf("file %s term %d: %w: chunks [%d,%d) of %s hold %d bytes, term says %d",
				file.Hash, i, ErrTermMismatch, t.Start, t.End, t.Xorb, raw, t.RawBytes)
		}
		bs, be := l.ByteRange(t.Start, t.End)
		rec.Terms[i] = Term{Xorb: t.Xorb, Start: t.Start, End: t.End, RawBytes: t.RawBytes, ByteStart: bs, ByteEnd: be}
		rec.Size += uint64(t.RawBytes)
	}
	rec.ix = indexTerms(rec.Terms)
	return rec, nil
}

// checkLayout reports whether l agrees with t (used before trimming t with l).
func checkLayout(t *Term, l *xorb.Layout) error {
	if l == nil || l.Hash != t.Xorb {
		return fmt.Errorf("%w: no layout for xorb %s", ErrTermMismatch, t.Xorb)
	}
	if len(l.StoredEnds) != l.NumChunks() || len(l.RawEnds) != l.NumChunks() {
		return fmt.Errorf("%w: layout of %s is inconsistent", ErrTermMismatch, t.Xorb)
	}
	if err := l.CheckRange(t.Start, t.End); err != nil {
		return fmt.Errorf("%w: %w", ErrTermMismatch, err)
	}
	bs, be := l.ByteRange(t.Start, t.End)
	if bs != t.ByteStart || be != t.ByteEnd || l.RawRange(t.Start, t.End) != t.RawBytes {
		return fmt.Errorf("%w: chunks [%d,%d) of %s: layout gives bytes [%d,%d) raw %d, record [%d,%d) raw %d",
			ErrTermMismatch, t.Start, t.End, t.Xorb, bs, be, l.RawRange(t.Start, t.End), t.ByteStart, t.ByteEnd, t.RawBytes)
	}
	return nil
}

// Binary encoding of a FileRecord (all integers unsigned varints unless noted):
//
//	u8      version = 1
//	u8      flags: bit 0 = SHA256 present; other bits zero
//	[32]    file hash (raw)
//	[32]    sha256 (raw, shard byte order), only when flag bit 0
//	uvarint size
//	uvarint number of distinct xorbs X, then X raw 32-byte hashes in first-use order
//	uvarint number of terms T, then per term:
//	        xorb index (< X), start, end-start, raw bytes, byte start, byteEnd-byteStart
//
// The xorb table makes a term ~8-12 bytes instead of 52. Decoding checks every count against the
// bytes left before allocating and checks the record invariants (see UnmarshalFileRecord).
const (
	recordVersion  = 1
	flagSHA256     = 1
	minTermEncoded = 6 // six one-byte varints
)

// MarshalBinary encodes f as described above. It never fails for a record that satisfies the
// invariants UnmarshalFileRecord checks; it returns an error wrapping ErrCorrupt otherwise.
func (f *FileRecord) MarshalBinary() ([]byte, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	ix := f.index()
	xorbs := ix.xorbs
	out := make([]byte, 0, 2+2*hash.Size+3*binary.MaxVarintLen64+hash.Size*len(xorbs)+12*len(f.Terms))
	var flags byte
	if f.SHA256 != nil {
		flags |= flagSHA256
	}
	out = append(out, recordVersion, flags)
	out = append(out, f.Hash[:]...)
	if f.SHA256 != nil {
		out = append(out, f.SHA256[:]...)
	}
	out = binary.AppendUvarint(out, f.Size)
	out = binary.AppendUvarint(out, uint64(len(xorbs)))
	for i := range xorbs {
		out = append(out, xorbs[i][:]...)
	}
	out = binary.AppendUvarint(out, uint64(len(f.Terms)))
	for i := range f.Terms {
		t := &f.Terms[i]
		out = binary.AppendUvarint(out, uint64(ix.xorb[i]))
		out = binary.AppendUvarint(out, uint64(t.Start))
		out = binary.AppendUvarint(out, uint64(t.End-t.Start))
		out = binary.AppendUvarint(out, uint64(t.RawBytes))
		out = binary.AppendUvarint(out, uint64(t.ByteStart))
		out = binary.AppendUvarint(out, uint64(t.ByteEnd-t.ByteStart))
	}
	return out, nil
}

// UnmarshalFileRecord decodes a record written by MarshalBinary. Besides the format it checks the
// invariants Plan relies on, for every term: 0 <= Start < End <= xorb.MaxChunks,
// 0 < RawBytes <= xorb.MaxRawBytes, ByteEnd-ByteStart >= 8*(End-Start), and that Size is the sum
// of RawBytes. Errors wrap ErrCorrupt. The result does not alias data.
func UnmarshalFileRecord(data []byte) (*FileRecord, error) {
	d := decoder{buf: data}
	if len(data) < 2+hash.Size {
		return nil, fmt.Errorf("%w: %d bytes is too short", ErrCorrupt, len(data))
	}
	if data[0] != recordVersion {
		return nil, fmt.Errorf("%w: unknown version %d", ErrCorrupt, data[0])
	}
	flags := data[1]
	if flags&^flagSHA256 != 0 {
		return nil, fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, flags)
	}
	d.buf = data[2:]
	f := &FileRecord{}
	d.hash(&f.Hash)
	if flags&flagSHA256 != 0 {
		var s hash.Hash
		d.hash(&s)
		f.SHA256 = &s
	}
	f.Size = d.uvarint()
	nx := d.count(hash.Size)
	xorbs := make([]hash.Hash, nx)
	for i := range xorbs {
		d.hash(&xorbs[i])
	}
	nt := d.count(minTermEncoded)
	if d.err != nil {
		return nil, d.err
	}
	if nx > nt || (nt > 0 && nx == 0) {
		return nil, fmt.Errorf("%w: %d xorbs for %d terms", ErrCorrupt, nx, nt)
	}
	f.Terms = make([]Term, nt)
	// The table is normally in first-use order without duplicates (MarshalBinary writes it so);
	// canon maps any table to that canonical order so the term index groups by distinct hash.
	// byHash is consulted once per table entry, on its first use.
	ix := &termIndex{xorb: make([]int32, nt), xorbs: make([]hash.Hash, 0, nx), ends: make([]uint64, 0, (nt+blockTerms-1)/blockTerms)}
	if nt > 0 {
		ix.first = &f.Terms[0]
	}
	canon := make([]int32, nx)
	for k := range canon {
		canon[k] = -1
	}
	byHash := make(map[hash.Hash]int32, nx)
	var pos uint64 // file offset after term i; cannot overflow: nt*(2^32-1) < 2^64
	buf := d.buf
	for i := range f.Terms {
		var v [6]uint64
		for k := range v {
			// Fast paths for one- to three-byte varints (chunk indices, sizes and offsets of a
			// xorb up to 2 MiB), the same values binary.Uvarint gives.
			if len(buf) >= 3 {
				b0, b1, b2 := uint64(buf[0]), uint64(buf[1]), uint64(buf[2])
				switch {
				case b0 < 0x80:
					v[k], buf = b0, buf[1:]
					continue
				case b1 < 0x80:
					v[k], buf = b0&0x7f|b1<<7, buf[2:]
					continue
				case b2 < 0x80:
					v[k], buf = b0&0x7f|(b1&0x7f)<<7|b2<<14, buf[3:]
					continue
				}
			}
			x, n := binary.Uvarint(buf)
			if n <= 0 || x > 1<<32-1 {
				return nil, fmt.Errorf("%w: term %d: truncated or bad varint", ErrCorrupt, i)
			}
			v[k], buf = x, buf[n:]
		}
		if v[0] >= uint64(nx) {
			return nil, fmt.Errorf("%w: term %d names xorb %d of %d", ErrCorrupt, i, v[0], nx)
		}
		end, byteEnd := v[1]+v[2], v[4]+v[5]
		if end > 1<<32-1 || byteEnd > 1<<32-1 {
			return nil, fmt.Errorf("%w: term %d overflows", ErrCorrupt, i)
		}
		f.Terms[i] = Term{Xorb: xorbs[v[0]], Start: uint32(v[1]), End: uint32(end), RawBytes: uint32(v[3]),
			ByteStart: uint32(v[4]), ByteEnd: uint32(byteEnd)}
		c := canon[v[0]]
		if c < 0 {
			var ok bool
			if c, ok = byHash[xorbs[v[0]]]; !ok {
				c = int32(len(ix.xorbs))
				byHash[xorbs[v[0]]] = c
				ix.xorbs = append(ix.xorbs, xorbs[v[0]])
			}
			canon[v[0]] = c
		}
		ix.xorb[i] = c
		pos += v[3]
		if i%blockTerms == blockTerms-1 || i == nt-1 {
			ix.ends = append(ix.ends, pos)
		}
	}
	d.buf = buf
	if len(d.buf) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.buf))
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	f.ix = ix
	return f, nil
}

// check verifies the record invariants listed on UnmarshalFileRecord.
func (f *FileRecord) check() error {
	var size uint64
	for i := range f.Terms {
		t := &f.Terms[i]
		if t.Start >= t.End || t.End > xorb.MaxChunks {
			return fmt.Errorf("%w: term %d has chunk range [%d,%d)", ErrCorrupt, i, t.Start, t.End)
		}
		if t.RawBytes == 0 || t.RawBytes > xorb.MaxRawBytes {
			return fmt.Errorf("%w: term %d has %d raw bytes", ErrCorrupt, i, t.RawBytes)
		}
		if t.ByteEnd < t.ByteStart || t.ByteEnd-t.ByteStart < xorb.HeaderSize*(t.End-t.Start) {
			return fmt.Errorf("%w: term %d has byte range [%d,%d) for %d chunks", ErrCorrupt, i, t.ByteStart, t.ByteEnd, t.End-t.Start)
		}
		size += uint64(t.RawBytes)
	}
	if size != f.Size {
		return fmt.Errorf("%w: terms hold %d bytes, record says %d", ErrCorrupt, size, f.Size)
	}
	return nil
}

// decoder reads varints and hashes, remembering the first error.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated or bad %s", ErrCorrupt, what)
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// count reads a count of items that each take at least per bytes, and rejects counts the
// remaining input cannot hold, so allocations are bounded by the input size.
func (d *decoder) count(per int) int {
	v := d.uvarint()
	if d.err == nil && v > uint64(len(d.buf)/per) {
		d.err = fmt.Errorf("%w: count %d exceeds the %d bytes left", ErrCorrupt, v, len(d.buf))
	}
	if d.err != nil {
		return 0
	}
	return int(v)
}

func (d *decoder) hash(h *hash.Hash) {
	if d.err != nil {
		return
	}
	if len(d.buf) < hash.Size {
		d.fail("hash")
		return
	}
	copy(h[:], d.buf[:hash.Size])
	d.buf = d.buf[hash.Size:]
}
