package xorb

import (
	"encoding/binary"
	"fmt"

	"github.com/pierrec/lz4/v4"
)

// LZ4 frame format constants (lz4 Frame Format Description 1.6).
const (
	lz4Magic          = 0x184D2204
	lz4SkippableMagic = 0x184D2A50 // low 4 bits are free
	lz4MaxOffset      = 64 << 10   // a match reaches at most this far back
	lz4BlockSize      = 64 << 10   // block size our encoder writes (lz4_flex's default)
	lz4EndMark        = 0
	lz4Uncompressed   = 1 << 31 // block size flag: block stored as is

	flgVersionMask  = 0xC0
	flgVersion      = 0x40
	flgIndependent  = 0x20
	flgBlockSum     = 0x10
	flgContentSize  = 0x08
	flgContentSum   = 0x04
	flgReserved     = 0x02
	flgDictID       = 0x01
	bdReservedMask  = 0x8F
	bdBlockMaxShift = 4
)

// decodeLZ4Frames decodes the LZ4 frame(s) in src into out, which must have exactly the
// length the caller is prepared to accept; it returns how many bytes were written. It accepts
// what the reference frame decoder accepts: independent or linked blocks, block and content
// checksums (verified), a content size (checked), uncompressed blocks, skippable frames and
// several concatenated frames. It rejects frames that need an external dictionary. It never
// writes past len(out): output that would not fit is an error. All errors wrap ErrCorrupt.
func decodeLZ4Frames(out, src []byte) (int, error) {
	n := 0
	frames := 0
	for len(src) > 0 {
		if len(src) < 4 {
			return n, fmt.Errorf("%w: lz4: truncated frame magic", ErrCorrupt)
		}
		magic := binary.LittleEndian.Uint32(src)
		if magic&^0xF == lz4SkippableMagic {
			if len(src) < 8 {
				return n, fmt.Errorf("%w: lz4: truncated skippable frame", ErrCorrupt)
			}
			size := binary.LittleEndian.Uint32(src[4:])
			if uint64(size) > uint64(len(src)-8) {
				return n, fmt.Errorf("%w: lz4: truncated skippable frame", ErrCorrupt)
			}
			src = src[8+size:]
			continue
		}
		if magic != lz4Magic {
			return n, fmt.Errorf("%w: lz4: bad frame magic %#08x", ErrCorrupt, magic)
		}
		var err error
		n, src, err = decodeLZ4Frame(out, n, src[4:])
		if err != nil {
			return n, err
		}
		frames++
	}
	if frames == 0 {
		return n, fmt.Errorf("%w: lz4: no frame", ErrCorrupt)
	}
	return n, nil
}

// decodeLZ4Frame decodes one frame whose magic has been consumed, writing at out[n:]. It returns
// the new output length and the input that follows the frame.
func decodeLZ4Frame(out []byte, n int, src []byte) (int, []byte, error) {
	if len(src) < 3 {
		return n, nil, fmt.Errorf("%w: lz4: truncated frame descriptor", ErrCorrupt)
	}
	flg, bd := src[0], src[1]
	if flg&flgVersionMask != flgVersion || flg&flgReserved != 0 || bd&bdReservedMask != 0 {
		return n, nil, fmt.Errorf("%w: lz4: bad frame descriptor %#02x %#02x", ErrCorrupt, flg, bd)
	}
	code := bd >> bdBlockMaxShift
	if code < 4 {
		return n, nil, fmt.Errorf("%w: lz4: bad block size code %d", ErrCorrupt, code)
	}
	blockMax := 1 << (2*int(code) + 8) // 4: 64 KiB, 5: 256 KiB, 6: 1 MiB, 7: 4 MiB
	if flg&flgDictID != 0 {
		return n, nil, fmt.Errorf("%w: lz4: frame needs an external dictionary", ErrCorrupt)
	}
	descLen := 2
	if flg&flgContentSize != 0 {
		descLen += 8
	}
	if len(src) < descLen+1 {
		return n, nil, fmt.Errorf("%w: lz4: truncated frame descriptor", ErrCorrupt)
	}
	if byte(xxh32(src[:descLen])>>8) != src[descLen] {
		return n, nil, fmt.Errorf("%w: lz4: frame header checksum mismatch", ErrCorrupt)
	}
	contentSize := uint64(0)
	if flg&flgContentSize != 0 {
		contentSize = binary.LittleEndian.Uint64(src[2:])
	}
	src = src[descLen+1:]
	start := n
	for {
		if len(src) < 4 {
			return n, nil, fmt.Errorf("%w: lz4: truncated block size", ErrCorrupt)
		}
		bs := binary.LittleEndian.Uint32(src)
		src = src[4:]
		if bs == lz4EndMark {
			break
		}
		size := int(bs &^ lz4Uncompressed)
		if size > blockMax {
			return n, nil, fmt.Errorf("%w: lz4: block of %d bytes exceeds frame maximum %d", ErrCorrupt, size, blockMax)
		}
		need := size
		if flg&flgBlockSum != 0 {
			need += 4
		}
		if len(src) < need {
			return n, nil, fmt.Errorf("%w: lz4: truncated block", ErrCorrupt)
		}
		data := src[:size]
		if flg&flgBlockSum != 0 && xxh32(data) != binary.LittleEndian.Uint32(src[size:]) {
			return n, nil, fmt.Errorf("%w: lz4: block checksum mismatch", ErrCorrupt)
		}
		src = src[need:]
		room := min(len(out)-n, blockMax)
		if bs&lz4Uncompressed != 0 {
			if size > room {
				return n, nil, fmt.Errorf("%w: lz4: output exceeds the chunk's raw length", ErrCorrupt)
			}
			n += copy(out[n:], data)
			continue
		}
		dst := out[n : n+room]
		if room == 0 {
			// pierrec's amd64 decoder faults on a nil destination; a block may still legally
			// decode to nothing, so give it a 1-byte one and treat any output as overflow.
			var tiny [1]byte
			dst = tiny[:]
		}
		var k int
		var err error
		if flg&flgIndependent != 0 {
			k, err = lz4.UncompressBlock(data, dst)
		} else {
			// Linked blocks may copy from up to 64 KiB of this frame's earlier output.
			k, err = lz4.UncompressBlockWithDict(data, dst, out[max(start, n-lz4MaxOffset):n])
		}
		if err == nil && k > room {
			err = lz4.ErrInvalidSourceShortBuffer
		}
		if err != nil {
			return n, nil, fmt.Errorf("%w: lz4: bad block or output exceeds the chunk's raw length", ErrCorrupt)
		}
		n += k
	}
	if flg&flgContentSum != 0 {
		if len(src) < 4 {
			return n, nil, fmt.Errorf("%w: lz4: truncated content checksum", ErrCorrupt)
		}
		if xxh32(out[start:n]) != binary.LittleEndian.Uint32(src) {
			return n, nil, fmt.Errorf("%w: lz4: content checksum mismatch", ErrCorrupt)
		}
		src = src[4:]
	}
	if flg&flgContentSize != 0 && contentSize != uint64(n-start) {
		return n, nil, fmt.Errorf("%w: lz4: frame declares %d bytes but holds %d", ErrCorrupt, contentSize, n-start)
	}
	return n, src, nil
}

// appendLZ4Frame appends raw as one LZ4 frame with the settings the upstream client's encoder
// uses by default: independent 64 KiB blocks, no checksums, no content size. Blocks that do not
// shrink are stored uncompressed.
func appendLZ4Frame(dst, raw []byte, c *lz4.Compressor) []byte {
	const flg = flgVersion | flgIndependent
	const bd = 4 << bdBlockMaxShift
	desc := [2]byte{flg, bd}
	dst = binary.LittleEndian.AppendUint32(dst, lz4Magic)
	dst = append(dst, flg, bd, byte(xxh32(desc[:])>>8))
	for len(raw) > 0 {
		block := raw[:min(len(raw), lz4BlockSize)]
		raw = raw[len(block):]
		at := len(dst)
		bound := lz4.CompressBlockBound(len(block))
		dst = grow(dst, 4+bound)
		k, err := c.CompressBlock(block, dst[at+4:at+4+bound])
		if err != nil || k == 0 || k >= len(block) {
			dst = binary.LittleEndian.AppendUint32(dst[:at], uint32(len(block))|lz4Uncompressed)
			dst = append(dst, block...)
			continue
		}
		binary.LittleEndian.PutUint32(dst[at:], uint32(k))
		dst = dst[:at+4+k]
	}
	return binary.LittleEndian.AppendUint32(dst, lz4EndMark)
}

// grow returns b extended by n bytes (contents of the new bytes unspecified), reallocating
// at most once.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}
