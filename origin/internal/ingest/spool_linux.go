package ingest

import "syscall"

// newSegment maps a segment of its own, asking the kernel for a transparent huge page
// (MADV_HUGEPAGE: honoured where transparent_hugepage is "madvise" or "always"). A spool's
// segments are written once, front to back, and dropped after one PUT, so what they cost is
// their first touch: 512 page faults and clears of 4 KiB each per segment on the Go heap, one
// fault of 2 MiB here (perf/BENCHMARKS.md, 2026-12-02, "Small-file uploads on Postgres +
// MinIO, second pass"). A kernel that refuses the advice, or a mapping that is not 2 MiB
// aligned, gives ordinary pages; a failed mapping falls back to the heap (mapped false).
func newSegment() (b []byte, mapped bool) {
	b, err := syscall.Mmap(-1, 0, spoolSegment, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, spoolSegment), false
	}
	_ = syscall.Madvise(b, madvHugepage) // advice only: ordinary pages without it
	return b, true
}

// madvHugepage is MADV_HUGEPAGE (not in package syscall).
const madvHugepage = 14

// freeSegment unmaps a segment newSegment mapped; a heap one is left to the collector.
func freeSegment(b []byte, mapped bool) {
	if !mapped {
		return
	}
	if err := syscall.Munmap(b); err != nil {
		panic("ingest: unmapping a spool segment: " + err.Error()) // not ours: a bug
	}
}

// newFlat maps n bytes for a flat body (flat.go), with the same advice as a segment: only the
// pages the body touches are ever backed.
func newFlat(n int64) ([]byte, error) {
	if !flatBodies {
		return nil, errNoFlat
	}
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	_ = syscall.Madvise(b, madvHugepage)
	return b, nil
}

// unmapFlat unmaps what newFlat mapped.
func unmapFlat(b []byte) {
	if err := syscall.Munmap(b); err != nil {
		panic("ingest: unmapping a flat body: " + err.Error()) // not ours: a bug
	}
}
