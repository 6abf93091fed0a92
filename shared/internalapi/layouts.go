package internalapi

import (
	"encoding/binary"
	"fmt"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// The layouts answer (docs/protocol.md §16.3), integers little-endian:
//
//	u32 n | n × ([32] raw xorb hash | u32 len | len bytes of xorb.Layout.MarshalBinary)

// AppendLayouts appends the layouts answer to a request for want: for each hash of want that
// got holds, in want's order and once however often it is repeated, the hash and got[h] (a
// binary layout, as the index stores it). Hashes of got that want does not name are left out.
// A layout longer than MaxLayoutBytes is an error (the edge would refuse the whole answer).
// got is not modified.
func AppendLayouts(dst []byte, want []hash.Hash, got map[hash.Hash][]byte) ([]byte, error) {
	size := 4
	for _, b := range got {
		size += layoutEntryHead + len(b)
	}
	if cap(dst)-len(dst) < size {
		dst = append(make([]byte, 0, len(dst)+size), dst...)
	}
	at := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, 0) // the count, set below
	var written map[hash.Hash]struct{}
	if len(want) > 1 {
		written = make(map[hash.Hash]struct{}, len(got))
	}
	n := uint32(0)
	for _, h := range want {
		b, ok := got[h]
		if !ok {
			continue
		}
		if written != nil {
			if _, dup := written[h]; dup {
				continue
			}
			written[h] = struct{}{}
		}
		if len(b) > MaxLayoutBytes {
			return nil, fmt.Errorf("internalapi: layout of %s is %d bytes, limit %d", h, len(b), MaxLayoutBytes)
		}
		dst = append(dst, h[:]...)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(b)))
		dst = append(dst, b...)
		n++
	}
	binary.LittleEndian.PutUint32(dst[at:], n)
	return dst, nil
}

// RawLayout is one entry of a layouts answer before its layout is decoded.
type RawLayout struct {
	Hash  hash.Hash
	Bytes []byte // the binary layout; aliases the answer
}

// SplitLayouts decodes the framing of a layouts answer of at most maxEntries entries, in order,
// without decoding the layouts. It refuses a count above maxEntries or above what len(b) can
// hold, a length above MaxLayoutBytes, a truncated entry and trailing bytes. Errors wrap
// ErrMalformed.
func SplitLayouts(b []byte, maxEntries int) ([]RawLayout, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: layouts answer of %d bytes is shorter than its count", ErrMalformed, len(b))
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n > uint64(max(maxEntries, 0)) {
		return nil, fmt.Errorf("%w: layouts answer has %d entries for %d hashes", ErrMalformed, n, maxEntries)
	}
	if n > uint64(len(b)/layoutEntryHead) {
		return nil, fmt.Errorf("%w: layouts answer of %d bytes cannot hold %d entries", ErrMalformed, len(b)+4, n)
	}
	out := make([]RawLayout, n)
	for i := range out {
		if len(b) < layoutEntryHead {
			return nil, fmt.Errorf("%w: layouts answer truncated at entry %d", ErrMalformed, i)
		}
		copy(out[i].Hash[:], b)
		ln := uint64(binary.LittleEndian.Uint32(b[hash.Size:]))
		b = b[layoutEntryHead:]
		if ln > MaxLayoutBytes {
			return nil, fmt.Errorf("%w: layout of %s is %d bytes, limit %d", ErrMalformed, out[i].Hash, ln, MaxLayoutBytes)
		}
		if ln > uint64(len(b)) {
			return nil, fmt.Errorf("%w: layouts answer truncated in entry %d", ErrMalformed, i)
		}
		out[i].Bytes = b[:ln:ln]
		b = b[ln:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: layouts answer has %d trailing bytes", ErrMalformed, len(b))
	}
	return out, nil
}

// DecodeLayouts decodes the layouts answer to a request for want and verifies every layout
// against the hash it is filed under (xorb.UnmarshalLayout, which recomputes the merkle hash):
// the result holds only layouts that describe exactly the xorb they name. An entry for a hash
// want does not name, a repeated entry, or a layout that names another xorb or does not verify
// is an error wrapping ErrMalformed (and xorb.ErrCorrupt for a layout that does not decode).
// Hashes of want the origin does not have are absent from the result.
func DecodeLayouts(b []byte, want []hash.Hash) (map[hash.Hash]*xorb.Layout, error) {
	asked := make(map[hash.Hash]bool, len(want))
	for _, h := range want {
		asked[h] = true
	}
	entries, err := SplitLayouts(b, len(asked))
	if err != nil {
		return nil, err
	}
	out := make(map[hash.Hash]*xorb.Layout, len(entries))
	for _, e := range entries {
		if !asked[e.Hash] {
			return nil, fmt.Errorf("%w: layouts answer has an entry %s not asked for", ErrMalformed, e.Hash)
		}
		if _, dup := out[e.Hash]; dup {
			return nil, fmt.Errorf("%w: layouts answer has %s twice", ErrMalformed, e.Hash)
		}
		l, err := xorb.UnmarshalLayout(e.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: layout of %s: %w", ErrMalformed, e.Hash, err)
		}
		if l.Hash != e.Hash {
			return nil, fmt.Errorf("%w: layout filed under %s names xorb %s", ErrMalformed, e.Hash, l.Hash)
		}
		out[e.Hash] = l
	}
	return out, nil
}
