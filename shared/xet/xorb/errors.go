package xorb

import "errors"

// Errors returned by this package wrap one of these sentinels; test with errors.Is.
var (
	// ErrCorrupt: the bytes are not a valid xorb or chunk (bad header, bad lengths, bad footer,
	// decompression failure, size mismatch, trailing garbage).
	ErrCorrupt = errors.New("xorb: corrupt")
	// ErrTooLarge: the xorb exceeds MaxRawBytes or MaxChunks, or a chunk exceeds its limits.
	ErrTooLarge = errors.New("xorb: too large")
	// ErrHashMismatch: the recomputed xorb hash differs from the expected one.
	ErrHashMismatch = errors.New("xorb: hash mismatch")
	// ErrEmpty: the body holds no chunk.
	ErrEmpty = errors.New("xorb: no chunks")
)
