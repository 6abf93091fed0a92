package shard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// ErrInvalid is wrapped by Validate: the Shard value cannot be written as a shard Parse accepts.
var ErrInvalid = errors.New("shard: invalid value")

// Validate reports the first reason s cannot round-trip through the writers and Parse: a file
// or xorb hash equal to the bookend (all 0xFF), verification entries whose count differs from the
// term count, or verification in some files but not others. It does not check chunk ranges or
// sizes against stored xorbs.
func (s *Shard) Validate() error {
	for i := range s.Files {
		f := &s.Files[i]
		if isBookendHash(f.Hash) {
			return fmt.Errorf("%w: file %d has the bookend hash", ErrInvalid, i)
		}
		if f.Verification != nil && len(f.Verification) != len(f.Terms) {
			return fmt.Errorf("%w: file %d has %d verification entries for %d terms",
				ErrInvalid, i, len(f.Verification), len(f.Terms))
		}
		if (f.Verification != nil) != (s.Files[0].Verification != nil) {
			return fmt.Errorf("%w: file %d: verification entries in some files but not others", ErrInvalid, i)
		}
	}
	for i := range s.Xorbs {
		if isBookendHash(s.Xorbs[i].Hash) {
			return fmt.Errorf("%w: xorb %d has the bookend hash", ErrInvalid, i)
		}
	}
	return nil
}

func isBookendHash(h hash.Hash) bool { return isBookend(h[:]) }

// EncodedLen is the number of bytes AppendUpload (withFooter false) or AppendWithFooter
// (withFooter true) appends.
func (s *Shard) EncodedLen(withFooter bool) int {
	n := 3 // header and two bookends
	for i := range s.Files {
		f := &s.Files[i]
		n += 1 + len(f.Terms)
		if f.Verification != nil {
			n += len(f.Terms)
		}
		if f.SHA256 != nil {
			n++
		}
	}
	for i := range s.Xorbs {
		n += 1 + len(s.Xorbs[i].Chunks)
	}
	n *= RecordSize
	if withFooter {
		n += FooterSize
	}
	return n
}

// AppendUpload appends s in the form hf_xet uploads: header with footer_size 0, file blocks,
// bookend, xorb blocks, bookend, no footer. s.Footer is ignored.
//
// A file gets verification entries iff Verification is non-nil (one per term; missing entries
// are written as zero hashes, extra ones dropped) and a metadata extension iff SHA256 is non-nil.
// Reserved fields are written as zero. Call Validate first if s comes from untrusted values.
func (s *Shard) AppendUpload(dst []byte) []byte { return s.appendShard(dst, false) }

// AppendWithFooter appends s followed by a 200-byte footer (§8.4) without lookup tables: the
// three table offsets equal footer_offset and their counts are 0. The HMAC key and timestamps
// come from s.Footer (zero when it is nil); the byte sums are computed from s. Offsets are
// relative to the start of the appended shard, not of dst.
func (s *Shard) AppendWithFooter(dst []byte) []byte { return s.appendShard(dst, true) }

func (s *Shard) appendShard(dst []byte, withFooter bool) []byte {
	dst = slices.Grow(dst, s.EncodedLen(withFooter))
	base := len(dst)
	le := binary.LittleEndian

	dst = append(dst, magicTag...)
	dst = le.AppendUint64(dst, Version)
	if withFooter {
		dst = le.AppendUint64(dst, FooterSize)
	} else {
		dst = le.AppendUint64(dst, 0)
	}

	var materialized, onDisk, stored uint64
	for i := range s.Files {
		f := &s.Files[i]
		var flags uint32
		if f.Verification != nil {
			flags |= FlagVerification
		}
		if f.SHA256 != nil {
			flags |= FlagMetadataExt
		}
		dst = append(dst, f.Hash[:]...)
		dst = le.AppendUint32(dst, flags)
		dst = le.AppendUint32(dst, uint32(len(f.Terms)))
		dst = le.AppendUint64(dst, 0)
		for _, t := range f.Terms {
			dst = append(dst, t.Xorb[:]...)
			dst = le.AppendUint32(dst, t.Flags)
			dst = le.AppendUint32(dst, t.RawBytes)
			dst = le.AppendUint32(dst, t.Start)
			dst = le.AppendUint32(dst, t.End)
			materialized += uint64(t.RawBytes)
		}
		if f.Verification != nil {
			for j := range f.Terms {
				var v hash.Hash
				if j < len(f.Verification) {
					v = f.Verification[j]
				}
				dst = appendHashRecord(dst, v)
			}
		}
		if f.SHA256 != nil {
			dst = appendHashRecord(dst, *f.SHA256)
		}
	}
	dst = appendBookend(dst)

	xorbOff := len(dst) - base
	for i := range s.Xorbs {
		x := &s.Xorbs[i]
		dst = append(dst, x.Hash[:]...)
		dst = le.AppendUint32(dst, x.Flags)
		dst = le.AppendUint32(dst, uint32(len(x.Chunks)))
		dst = le.AppendUint32(dst, x.RawBytes)
		dst = le.AppendUint32(dst, x.BytesOnDisk)
		for _, c := range x.Chunks {
			dst = append(dst, c.Hash[:]...)
			dst = le.AppendUint32(dst, c.RawStart)
			dst = le.AppendUint32(dst, c.RawLen)
			dst = le.AppendUint32(dst, c.Flags)
			dst = le.AppendUint32(dst, 0)
		}
		onDisk += uint64(x.BytesOnDisk)
		stored += uint64(x.RawBytes)
	}
	dst = appendBookend(dst)
	if !withFooter {
		return dst
	}

	var ft Footer
	if s.Footer != nil {
		ft = *s.Footer
	}
	footerOff := uint64(len(dst) - base)
	dst = le.AppendUint64(dst, FooterVer)
	dst = le.AppendUint64(dst, HeaderSize)
	dst = le.AppendUint64(dst, uint64(xorbOff))
	for range 3 { // lookup tables: none
		dst = le.AppendUint64(dst, footerOff)
		dst = le.AppendUint64(dst, 0)
	}
	dst = append(dst, ft.HMACKey[:]...)
	dst = le.AppendUint64(dst, ft.CreatedAt)
	dst = le.AppendUint64(dst, ft.KeyExpiry)
	dst = append(dst, make([]byte, 48)...) // reserved; a constant-size make does not escape
	dst = le.AppendUint64(dst, onDisk)
	dst = le.AppendUint64(dst, materialized)
	dst = le.AppendUint64(dst, stored)
	dst = le.AppendUint64(dst, footerOff)
	return dst
}

// appendHashRecord appends a 48-byte record holding h and 16 reserved zero bytes.
func appendHashRecord(dst []byte, h hash.Hash) []byte {
	dst = append(dst, h[:]...)
	return append(dst, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
}

// appendBookend appends a section bookend: 32 bytes of 0xFF, 16 zero bytes.
func appendBookend(dst []byte) []byte {
	return appendHashRecord(dst, hash.Hash{
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	})
}
