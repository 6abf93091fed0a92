package ingest

import (
	"sync"
	"syscall"
	"time"
)

// newSegment maps a segment of its own, in ordinary pages (pageAdvice); a failed mapping falls
// back to the heap (mapped false).
func newSegment() (b []byte, mapped bool) {
	b, err := syscall.Mmap(-1, 0, spoolSegment, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, spoolSegment), false
	}
	_ = syscall.Madvise(b, pageAdvice) // advice only
	return b, true
}

// pageAdvice is the advice every spool segment and flat body is mapped with: MADV_NOHUGEPAGE,
// ordinary 4 KiB pages even where transparent_hugepage is "always". A body's mapping is
// touched once, front to back, as the socket's bytes arrive, so what its memory costs is the
// first touch of each page. A fresh transparent huge page is taken from the kernel's free
// blocks of 2 MiB and more, which is what a virtual machine with free page reporting (virtio
// balloon) has handed back to its host: the first write to it then waits for the host to back
// and clear 2 MiB, 3-6x what ordinary pages cost on such a machine (72 MB in a fresh process:
// 88-226 ms with MADV_HUGEPAGE against 29-44 ms without, on a 2-vCPU KVM guest with page
// reporting; on a Xeon guest without it huge pages had saved ~20-35 ms per 70 MB). Ordinary
// pages are taken from what the kernel recycles, backed already (perf/BENCHMARKS.md,
// 2026-12-03, "Small-file uploads on Postgres + MinIO: huge pages cost the first touch";
// docs/decisions.md, "Ordinary pages for xorb bodies").
const pageAdvice = 15 // MADV_NOHUGEPAGE (not in package syscall)

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
// pages the body touches are ever backed. It hands out an idle mapping of an earlier body
// first (flatIdle), whose pages are backed already.
func newFlat(n int64) ([]byte, error) {
	if !flatBodies {
		return nil, errNoFlat
	}
	if b := flatIdle.take(n); b != nil {
		return b, nil
	}
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	_ = syscall.Madvise(b, pageAdvice)
	return b, nil
}

// unmapFlat gives up what newFlat mapped: kept idle for the next body when flatIdle has room,
// unmapped otherwise.
func unmapFlat(b []byte) {
	if !flatIdle.keep(b) {
		munmapFlat(b)
	}
}

func munmapFlat(b []byte) {
	if err := syscall.Munmap(b); err != nil {
		panic("ingest: unmapping a flat body: " + err.Error()) // not ours: a bug
	}
}

// madvFree is MADV_FREE (Linux 4.5; not in package syscall).
const madvFree = 8

// flatIdle keeps up to flatIdleMax mappings of finished flat bodies for the next ones. A fresh
// mapping costs its first touch: the kernel backs and clears each page before the socket's
// bytes are copied into it, ~20-40 ms of CPU per 70 MB of xorbs (perf/BENCHMARKS.md, 2026-12-02,
// "Small-file uploads on Postgres + MinIO, third pass"); a kept one is written over as it is.
// A kept mapping's pages are given to the kernel with MADV_FREE: they stay backed (and
// uncleared) until the kernel needs the memory, which it then takes without writing them
// anywhere, so idle mappings hold no memory the machine cannot have back, and
// limits.ingest_memory still bounds what uploads hold (they reserve as before, whether the
// mapping is fresh or kept: docs/decisions.md, "Flat bodies kept for the next upload"). What a
// reused mapping still holds of an earlier body is never read: a body's reads and its object
// cover only what it read into the mapping itself (flat.n, flat.size). Mappings idle for
// flatIdleFor are unmapped.
var flatIdle = &flatKeep{max: flatIdleMax, idleFor: flatIdleFor}

const (
	flatIdleMax = 2
	flatIdleFor = time.Minute
)

type flatKeep struct {
	max     int
	idleFor time.Duration

	mu    sync.Mutex
	idle  [][]byte
	timer *time.Timer // unmaps the idle mappings idleFor after the last one was kept
}

// take returns an idle mapping of n bytes, or nil.
func (k *flatKeep) take(n int64) []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := len(k.idle) - 1; i >= 0; i-- {
		if b := k.idle[i]; int64(len(b)) == n {
			k.idle = append(k.idle[:i], k.idle[i+1:]...)
			return b
		}
	}
	return nil
}

// keep keeps b idle if there is room and the kernel takes MADV_FREE; false: the caller unmaps b.
func (k *flatKeep) keep(b []byte) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.idle) >= k.max {
		return false
	}
	if err := syscall.Madvise(b, madvFree); err != nil {
		return false
	}
	k.idle = append(k.idle, b)
	if k.timer == nil {
		k.timer = time.AfterFunc(k.idleFor, k.drain)
	} else {
		k.timer.Reset(k.idleFor)
	}
	return true
}

// drain unmaps every idle mapping.
func (k *flatKeep) drain() {
	k.mu.Lock()
	idle := k.idle
	k.idle = nil
	k.mu.Unlock()
	for _, b := range idle {
		munmapFlat(b)
	}
}
