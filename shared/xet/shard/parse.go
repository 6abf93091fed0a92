package shard

import (
	"encoding/binary"
	"math"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// magicTag is the 32-byte header tag: "HFRepoMetaData", a NUL, then 17 fixed bytes (§0).
const magicTag = "HFRepoMetaData\x00UigEj{\x81W\x83\xa5\xbd\xd9\\\xcd\xd1J\xa9"

// Sizes of the entries of the optional lookup tables between the xorb section and the footer.
const (
	fileLookupEntry  = 12 // u64 truncated hash, u32 record index
	xorbLookupEntry  = 12
	chunkLookupEntry = 16 // u64 truncated hash, u32 xorb record index, u32 chunk offset
)

// Offsets of the footer fields (§8.4).
const (
	footVersion      = 0
	footFileInfo     = 8
	footXorbInfo     = 16
	footTables       = 24 // three (offset, count) pairs of u64
	footHMACKey      = 72
	footCreated      = 104
	footExpiry       = 112
	footStoredOnDisk = 168
	footMaterialized = 176
	footStored       = 184
	footOffset       = 192
)

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// isBookend reports whether the record starting at rec is a section bookend. Like the upstream
// reader, only the 32 hash bytes (all 0xFF) are looked at.
func isBookend(rec []byte) bool {
	return le64(rec[0:]) == math.MaxUint64 && le64(rec[8:]) == math.MaxUint64 &&
		le64(rec[16:]) == math.MaxUint64 && le64(rec[24:]) == math.MaxUint64
}

// counts is what the structural scan learns before anything is allocated.
type counts struct {
	files, terms, shas int
	verification       bool // files carry verification entries (all or none)
	xorbs, chunks      int
	xorbOff            int // start of the xorb-info section
	tailOff            int // first byte after the xorb-section bookend
}

// Parse decodes a shard: an upload body (header footer_size 0, as hf_xet sends), a shard with a
// 200-byte footer (as huggingface.js sends, and as global-dedup answers are), or a full shard with
// lookup tables before its footer (the tables are checked for bounds and otherwise ignored).
//
// Parsing is sequential: header, file blocks up to the bookend, xorb blocks up to the bookend.
// Bytes after the xorb-section bookend of a footer-less shard are ignored. With footer_size 200
// the footer is the last 200 bytes of body; its version, section offsets, table bounds and
// footer_offset must agree with the body.
//
// Parse checks structure only: it does not check chunk ranges, sizes or hashes against stored
// xorbs (the origin does), and it keeps duplicate file records as they appear. Unknown flag bits
// and reserved fields are ignored. The result does not alias body; body must not change while
// Parse runs. Every allocation is bounded by len(body).
//
// Errors wrap ErrTooLarge (len(body) > MaxSize) or ErrCorrupt in a *FormatError.
func Parse(body []byte) (*Shard, error) {
	if len(body) > MaxSize {
		return nil, &FormatError{Offset: MaxSize, What: "body exceeds the shard size limit", Err: ErrTooLarge}
	}
	if len(body) < HeaderSize {
		return nil, corrupt(0, "header: %d bytes, want %d", len(body), HeaderSize)
	}
	if string(body[:32]) != magicTag {
		return nil, corrupt(0, "header: bad magic tag")
	}
	if v := le64(body[32:]); v != Version {
		return nil, corrupt(32, "header: version %d, want %d", v, Version)
	}
	end := len(body) // end of the record sections' region
	switch fs := le64(body[40:]); fs {
	case 0:
	case FooterSize:
		if len(body) < HeaderSize+FooterSize {
			return nil, corrupt(len(body), "footer: body of %d bytes has no room for a %d-byte footer", len(body), FooterSize)
		}
		end -= FooterSize
	default:
		return nil, corrupt(40, "header: footer_size %d, want 0 or %d", fs, FooterSize)
	}

	c, err := scan(body[:end])
	if err != nil {
		return nil, err
	}
	s := decode(body, &c)
	if end != len(body) {
		f, err := parseFooter(body[end:], end, &c)
		if err != nil {
			return nil, err
		}
		s.Footer = f
	}
	return s, nil
}

// scan walks both sections, checking that every count fits in the records that remain, and
// returns the totals decode needs.
func scan(b []byte) (counts, error) {
	var c counts
	off := HeaderSize
	for {
		if len(b)-off < RecordSize {
			return c, corrupt(off, "file section: no bookend after %d files", c.files)
		}
		rec := b[off : off+RecordSize]
		if isBookend(rec) {
			off += RecordSize
			break
		}
		flags, n := le32(rec[32:]), uint64(le32(rec[36:]))
		verif := flags&FlagVerification != 0
		need := 1 + n
		if verif {
			need += n
		}
		if flags&FlagMetadataExt != 0 {
			need++
			c.shas++
		}
		if left := uint64(len(b)-off) / RecordSize; need > left {
			return c, corrupt(off, "file %d: %d terms need %d records, %d remain", c.files, n, need, left)
		}
		if c.files == 0 {
			c.verification = verif
		} else if verif != c.verification {
			return c, corrupt(off, "file %d: verification entries in some files but not others", c.files)
		}
		c.files++
		c.terms += int(n)
		off += int(need) * RecordSize
	}
	c.xorbOff = off
	for {
		if len(b)-off < RecordSize {
			return c, corrupt(off, "xorb section: no bookend after %d xorbs", c.xorbs)
		}
		rec := b[off : off+RecordSize]
		if isBookend(rec) {
			off += RecordSize
			break
		}
		n := uint64(le32(rec[36:]))
		if left := uint64(len(b)-off) / RecordSize; 1+n > left {
			return c, corrupt(off, "xorb %d: %d chunks need %d records, %d remain", c.xorbs, n, 1+n, left)
		}
		c.xorbs++
		c.chunks += int(n)
		off += int(1+n) * RecordSize
	}
	c.tailOff = off
	return c, nil
}

// decode fills a Shard from records scan has validated. All terms, verification hashes, sha256
// values and chunks live in one slice each, sub-sliced per file and xorb with capped capacity.
// Terms and Chunks are nil when empty; Verification is non-nil (possibly empty) iff the file
// has the verification flag.
func decode(b []byte, c *counts) *Shard {
	s := &Shard{}
	if c.files > 0 {
		s.Files = make([]File, c.files)
	}
	terms := make([]Term, c.terms)
	var verifs []hash.Hash
	if c.verification {
		verifs = make([]hash.Hash, c.terms)
	}
	var shas []hash.Hash
	if c.shas > 0 {
		shas = make([]hash.Hash, c.shas)
	}
	off := HeaderSize
	for i := range s.Files {
		f := &s.Files[i]
		rec := b[off : off+RecordSize]
		copy(f.Hash[:], rec[:32])
		flags, n := le32(rec[32:]), int(le32(rec[36:]))
		off += RecordSize
		if n > 0 {
			f.Terms = terms[:n:n]
			terms = terms[n:]
		}
		for j := range f.Terms {
			t := &f.Terms[j]
			rec := b[off : off+RecordSize]
			copy(t.Xorb[:], rec[:32])
			t.Flags = le32(rec[32:])
			t.RawBytes = le32(rec[36:])
			t.Start = le32(rec[40:])
			t.End = le32(rec[44:])
			off += RecordSize
		}
		if flags&FlagVerification != 0 {
			f.Verification = verifs[:n:n]
			verifs = verifs[n:]
			for j := range f.Verification {
				copy(f.Verification[j][:], b[off:off+32])
				off += RecordSize
			}
		}
		if flags&FlagMetadataExt != 0 {
			copy(shas[0][:], b[off:off+32])
			f.SHA256 = &shas[0]
			shas = shas[1:]
			off += RecordSize
		}
	}
	off += RecordSize // file-section bookend
	if c.xorbs > 0 {
		s.Xorbs = make([]Xorb, c.xorbs)
	}
	chunks := make([]XorbChunk, c.chunks)
	for i := range s.Xorbs {
		x := &s.Xorbs[i]
		rec := b[off : off+RecordSize]
		copy(x.Hash[:], rec[:32])
		x.Flags = le32(rec[32:])
		n := int(le32(rec[36:]))
		x.RawBytes = le32(rec[40:])
		x.BytesOnDisk = le32(rec[44:])
		off += RecordSize
		if n > 0 {
			x.Chunks = chunks[:n:n]
			chunks = chunks[n:]
		}
		for j := range x.Chunks {
			ch := &x.Chunks[j]
			rec := b[off : off+RecordSize]
			copy(ch.Hash[:], rec[:32])
			ch.RawStart = le32(rec[32:])
			ch.RawLen = le32(rec[36:])
			ch.Flags = le32(rec[40:])
			off += RecordSize
		}
	}
	return s
}

// parseFooter checks and decodes the footer f, which starts at byte at of the body.
func parseFooter(f []byte, at int, c *counts) (*Footer, error) {
	if v := le64(f[footVersion:]); v != FooterVer {
		return nil, corrupt(at+footVersion, "footer: version %d, want %d", v, FooterVer)
	}
	if v := le64(f[footOffset:]); v != uint64(at) {
		return nil, corrupt(at+footOffset, "footer: footer_offset %d, footer is at %d", v, at)
	}
	if v := le64(f[footFileInfo:]); v != HeaderSize {
		return nil, corrupt(at+footFileInfo, "footer: file_info_offset %d, want %d", v, HeaderSize)
	}
	if v := le64(f[footXorbInfo:]); v != uint64(c.xorbOff) {
		return nil, corrupt(at+footXorbInfo, "footer: xorb_info_offset %d, xorb section is at %d", v, c.xorbOff)
	}
	// Lookup tables lie between the xorb-section bookend and the footer. With no entries, the
	// offset may be 0 (huggingface.js) or anywhere in that gap (xet-core writes footer_offset).
	names := [3]string{"file", "xorb", "chunk"}
	sizes := [3]uint64{fileLookupEntry, xorbLookupEntry, chunkLookupEntry}
	lo, hi := uint64(c.tailOff), uint64(at)
	for i := range 3 {
		pos := footTables + 16*i
		toff, n := le64(f[pos:]), le64(f[pos+8:])
		if n == 0 && toff == 0 {
			continue
		}
		if toff < lo || toff > hi || n > (hi-toff)/sizes[i] {
			return nil, corrupt(at+pos, "footer: %s lookup table of %d entries at %d lies outside [%d, %d)",
				names[i], n, toff, lo, hi)
		}
	}
	ft := &Footer{
		CreatedAt:         le64(f[footCreated:]),
		KeyExpiry:         le64(f[footExpiry:]),
		StoredBytesOnDisk: le64(f[footStoredOnDisk:]),
		MaterializedBytes: le64(f[footMaterialized:]),
		StoredBytes:       le64(f[footStored:]),
	}
	copy(ft.HMACKey[:], f[footHMACKey:footHMACKey+32])
	return ft, nil
}
