package internalapi

import (
	"fmt"

	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// The file answer is the record's binary encoding, recon.FileRecord.MarshalBinary
// (docs/protocol.md §16.3). The origin ships the bytes its index stores, which are that
// encoding; EncodeFile is for a record held decoded.

// EncodeFile encodes rec as the file answer (recon.FileRecord.MarshalBinary).
func EncodeFile(rec *recon.FileRecord) ([]byte, error) { return rec.MarshalBinary() }

// DecodeFile decodes the file answer to a request for file h: an answer longer than
// MaxFileAnswer, a record that does not decode (recon.UnmarshalFileRecord checks the format
// and the record's invariants; its errors wrap recon.ErrCorrupt) or a record of another file is
// an error wrapping ErrMalformed.
func DecodeFile(b []byte, h hash.Hash) (*recon.FileRecord, error) {
	if len(b) > MaxFileAnswer {
		return nil, fmt.Errorf("%w: file answer of %d bytes, limit %d", ErrMalformed, len(b), MaxFileAnswer)
	}
	rec, err := recon.UnmarshalFileRecord(b)
	if err != nil {
		return nil, fmt.Errorf("%w: record of %s: %w", ErrMalformed, h, err)
	}
	if rec.Hash != h {
		return nil, fmt.Errorf("%w: record of %s names file %s", ErrMalformed, h, rec.Hash)
	}
	return rec, nil
}
