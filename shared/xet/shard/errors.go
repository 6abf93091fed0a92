package shard

import (
	"errors"
	"fmt"
)

// Errors returned by Parse wrap one of these sentinels (inside a *FormatError); test with
// errors.Is.
var (
	// ErrCorrupt: the bytes are not a well-formed shard (bad magic tag or version, truncated
	// record, a count that needs more records than remain, missing bookend, verification entries
	// in some files but not others, bad footer).
	ErrCorrupt = errors.New("shard: corrupt")
	// ErrTooLarge: the body is longer than MaxSize.
	ErrTooLarge = errors.New("shard: too large")
)

// FormatError locates a parse failure. Err is ErrCorrupt or ErrTooLarge.
type FormatError struct {
	Offset int    // byte offset in the body of the record or field at fault
	What   string // what was wrong, naming the record (e.g. "file 2: 7 terms need 15 records, 3 remain")
	Err    error
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%v: %s (offset %d)", e.Err, e.What, e.Offset)
}

func (e *FormatError) Unwrap() error { return e.Err }

func corrupt(off int, format string, args ...any) error {
	return &FormatError{Offset: off, What: fmt.Sprintf(format, args...), Err: ErrCorrupt}
}
