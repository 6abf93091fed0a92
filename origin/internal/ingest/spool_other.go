//go:build !linux

package ingest

// newSegment allocates a segment on the heap (spool_linux.go maps it instead).
func newSegment() (b []byte, mapped bool) { return make([]byte, spoolSegment), false }

func freeSegment([]byte, bool) {}

// newFlat has no mapping to give here: bodies are spooled (flat.go).
func newFlat(int64) ([]byte, error) { return nil, errNoFlat }

func unmapFlat([]byte) {}
