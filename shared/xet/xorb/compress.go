package xorb

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/pierrec/lz4/v4"
)

// Auto is not a wire scheme: passed to an encoder it means "choose with ChooseScheme", as the
// upstream client's default policy does. Chunk headers carrying 99 are rejected like any other
// unknown id.
const Auto Scheme = 99

// Encoder compresses chunks. It keeps the LZ4 match table and a scratch buffer between calls so
// that encoding many chunks allocates nothing per chunk. The zero value is ready to use; an
// Encoder is not safe for concurrent use.
type Encoder struct {
	lz      lz4.Compressor
	scratch []byte
}

// AppendCompressed appends the serialized chunk (header and payload) of raw to dst, compressed
// with s (Auto: ChooseScheme(raw)). Like the upstream writer it falls back to None when the
// compressed payload is not strictly smaller than raw. It returns the extended slice and the
// scheme written. raw must be at most MaxChunkRaw bytes and s one of None, LZ4, BG4 or Auto;
// otherwise the chunk is written uncompressed (and will fail validation if too large).
func (e *Encoder) AppendCompressed(dst, raw []byte, s Scheme) ([]byte, Scheme) {
	if s == Auto {
		s = ChooseScheme(raw)
	}
	at := len(dst)
	dst = append(dst, make([]byte, HeaderSize)...)
	switch s {
	case LZ4:
		dst = appendLZ4Frame(dst, raw, &e.lz)
	case ByteGrouping4LZ4:
		if cap(e.scratch) < len(raw) {
			e.scratch = make([]byte, len(raw))
		}
		e.scratch = e.scratch[:len(raw)]
		bg4Split(e.scratch, raw)
		dst = appendLZ4Frame(dst, e.scratch, &e.lz)
	default:
		s = None
	}
	if s != None && len(dst)-at-HeaderSize >= len(raw) {
		dst, s = dst[:at+HeaderSize], None
	}
	if s == None {
		dst = append(dst, raw...)
	}
	h := ChunkHeader{CompressedLen: uint32(len(dst) - at - HeaderSize), RawLen: uint32(len(raw)), Scheme: s}
	h.Append(dst[at:at])
	return dst, s
}

// AppendCompressed is (&Encoder{}).AppendCompressed; use an Encoder to compress many chunks.
func AppendCompressed(dst, raw []byte, s Scheme) ([]byte, Scheme) {
	var e Encoder
	return e.AppendCompressed(dst, raw, s)
}

// Decoder decompresses chunk payloads. It keeps the scratch buffer BG4 needs between calls.
// The zero value is ready to use; a Decoder is not safe for concurrent use.
type Decoder struct {
	scratch []byte
}

// DecodeChunk appends the decompressed payload of a chunk with header h to dst. The header's
// RawLen is a hard bound: at most RawLen bytes are allocated and written, and a payload that
// decodes to any other length is an error. h must have passed Check (ParseChunkHeader does
// that); payload must be exactly h.CompressedLen bytes. Errors wrap ErrCorrupt.
func (d *Decoder) DecodeChunk(dst []byte, h ChunkHeader, payload []byte) ([]byte, error) {
	if err := h.Check(); err != nil {
		return dst, err
	}
	if len(payload) != int(h.CompressedLen) {
		return dst, fmt.Errorf("%w: chunk payload is %d bytes, header says %d", ErrCorrupt, len(payload), h.CompressedLen)
	}
	raw := int(h.RawLen)
	at := len(dst)
	if cap(dst)-at < raw {
		nd := make([]byte, at, at+raw)
		copy(nd, dst)
		dst = nd
	}
	out := dst[at : at+raw]
	var n int
	var err error
	switch h.Scheme {
	case None:
		n = copy(out, payload) // Check guarantees equal lengths
	case LZ4:
		n, err = decodeLZ4Frames(out, payload)
	case ByteGrouping4LZ4:
		if cap(d.scratch) < raw {
			d.scratch = make([]byte, raw)
		}
		g := d.scratch[:raw]
		n, err = decodeLZ4Frames(g, payload)
		if err == nil && n == raw {
			bg4Join(out, g)
		}
	}
	if err != nil {
		return dst, fmt.Errorf("decode %s chunk: %w", h.Scheme, err)
	}
	if n != raw {
		return dst, fmt.Errorf("%w: %s chunk decodes to %d bytes, header says %d", ErrCorrupt, h.Scheme, n, raw)
	}
	return dst[:at+raw], nil
}

// chunkData is DecodeChunk for readers that only look at the result: a None chunk, after the
// same checks, is payload itself (no copy; aliased is true and dst is left alone), any other
// chunk is decoded into dst. Validation hashes every chunk of an upload, and copying the
// uncompressed ones first was a tenth of an upload's CPU (issue 13).
func (d *Decoder) chunkData(dst []byte, h ChunkHeader, payload []byte) (out []byte, aliased bool, err error) {
	if h.Scheme != None {
		out, err = d.DecodeChunk(dst, h, payload)
		return out, false, err
	}
	if err := h.Check(); err != nil {
		return dst, false, err
	}
	if len(payload) != int(h.CompressedLen) {
		return dst, false, fmt.Errorf("%w: chunk payload is %d bytes, header says %d", ErrCorrupt, len(payload), h.CompressedLen)
	}
	return payload, true, nil // Check guarantees RawLen == CompressedLen for None
}

// DecodeChunk is (&Decoder{}).DecodeChunk; use a Decoder to decode many chunks.
func DecodeChunk(dst []byte, h ChunkHeader, payload []byte) ([]byte, error) {
	var d Decoder
	return d.DecodeChunk(dst, h, payload)
}

// bg4Groups cuts b into the four byte groups of a buffer of len(b) bytes: with n = 4q+r, groups
// 0..r-1 hold q+1 bytes and the others q (docs/protocol.md §6).
func bg4Groups(b []byte) (g [4][]byte) {
	q, r := len(b)/4, len(b)%4
	at := 0
	for k := range g {
		size := q
		if k < r {
			size++
		}
		g[k] = b[at : at+size]
		at += size
	}
	return g
}

// bg4Split writes the byte-grouped form of src to dst (same length): group k holds the bytes at
// positions 4j+k, and the groups are concatenated in order 0..3.
func bg4Split(dst, src []byte) {
	g := bg4Groups(dst)
	q := len(src) / 4
	g0, g1, g2, g3 := g[0][:q], g[1][:q], g[2][:q], g[3][:q]
	for j := range q {
		s := src[4*j : 4*j+4 : 4*j+4]
		g0[j], g1[j], g2[j], g3[j] = s[0], s[1], s[2], s[3]
	}
	for k := 4 * q; k < len(src); k++ {
		g[k-4*q][q] = src[k]
	}
}

// bg4Join inverts bg4Split: dst and src have the same length.
func bg4Join(dst, src []byte) {
	g := bg4Groups(src)
	q := len(src) / 4
	g0, g1, g2, g3 := g[0][:q], g[1][:q], g[2][:q], g[3][:q]
	for j := range q {
		d := dst[4*j : 4*j+4 : 4*j+4]
		d[0], d[1], d[2], d[3] = g0[j], g1[j], g2[j], g3[j]
	}
	for k := 4 * q; k < len(dst); k++ {
		dst[k] = g[k-4*q][q]
	}
}

// RetestInterval is how many chunks the upstream client compresses with one ChooseScheme
// decision before deciding again (xet-core compression_scheme_retest_interval). Builder follows it.
const RetestInterval = 32

// ChooseScheme picks LZ4 or BG4 for raw the way the upstream client does
// (xet-core BG4Predictor, CompressionScheme::choose_from_data):
//
// For each of the four byte lanes (position mod 4) it builds a histogram of the bytes' popcounts
// (0..8). Let q be the distribution of all lanes together, each bin given one extra count, and
// p_i the distribution of lane i. BG4 is chosen when max_i KL(p_i || q) > 0.02, LZ4 otherwise:
// floating-point data (model weights) has lanes of very different bit statistics, text does not.
//
// Upstream sums p·ln(p/q), which is NaN for an empty bin of p (0·ln 0), and takes the maximum with
// Rust's f64::max, which ignores NaN: any lane with an empty popcount bin (or no bytes at all)
// therefore drops out of the maximum. We reproduce that so that our choice matches the client's.
//
// The client decides on the first chunk of each run of RetestInterval chunks (restarting at each
// file's first chunk) and uses that scheme for the whole run.
func ChooseScheme(raw []byte) Scheme {
	var hist [4][9]uint32
	i := 0
	for ; i+4 <= len(raw); i += 4 {
		hist[0][bits.OnesCount8(raw[i])]++
		hist[1][bits.OnesCount8(raw[i+1])]++
		hist[2][bits.OnesCount8(raw[i+2])]++
		hist[3][bits.OnesCount8(raw[i+3])]++
	}
	for k := 0; i < len(raw); i, k = i+1, k+1 {
		hist[k][bits.OnesCount8(raw[i])]++
	}
	var base [9]float64
	var totals [4]float64
	var all float64
	for j := range base {
		base[j] = 1
	}
	for l := range hist {
		for j, c := range hist[l] {
			base[j] += float64(c)
			totals[l] += float64(c)
		}
		all += totals[l]
	}
	maxKL := 0.0
	for l := range hist {
		kl := 0.0
		for j, c := range hist[l] {
			p := float64(c) / totals[l]
			q := base[j] / all
			kl += p * math.Log(p/q)
		}
		if !math.IsNaN(kl) && kl > maxKL {
			maxKL = kl
		}
	}
	if maxKL > 0.02 {
		return ByteGrouping4LZ4
	}
	return LZ4
}
