package datacache

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"syscall"
	"unsafe"
)

// Mapped writes (WriteMapped) serve a Range to a writer that must have the bytes in memory —
// TLS, which encrypts them — straight from the page cache through a read-only shared mapping
// of the segment file, instead of pread into a buffer first: the encryption reads the cached
// pages themselves, one copy of every byte fewer. The mapping has its own costs (page faults,
// mmap and munmap per window); on this machine the pread of a warm TLS GiB was 21 % of the
// edge's samples, the mappings 9 % (perf/BENCHMARKS.md, 2026-12-02, third pass). Readers still
// see only verified bytes: a mapping is read only below the part's verified length, exactly
// what Read would pread.
//
// A mapped page of a file that shrank behind the cache's back (no code of ours truncates a
// segment or temp file: eviction unlinks) would raise SIGBUS; WriteMapped turns a fault inside
// its mapping into an error (runtime/debug.SetPanicOnFault), as a short pread would be, instead
// of a crash. The Write it faulted in is abandoned mid-copy: TLS seals a record before it
// queues it, so no byte of that record is sent, and the answer ends short.

// mapWriteBytes is the largest single Write of mapped bytes: as many as one copy buffer of the
// TLS batch path held (copyBytes), so the records' batching is unchanged.
const mapWriteBytes = 256 << 10

// mapWindowBytes bounds one mapping: the page cache a TLS answer holds mapped — counted in the
// process's RSS as file pages while mapped — is at most this much, as the copy buffer it
// replaces was.
const mapWindowBytes = 256 << 10

// pageMask rounds file offsets down to a page for mmap.
var pageMask = int64(os.Getpagesize() - 1)

// WriteMapped writes the next n bytes of the Range to w, from mappings of its files, in Writes
// of at most mapWriteBytes, waiting for fills as Read does. Where a file cannot be mapped it
// copies through buf (len(buf) > 0) instead. It returns the bytes written; fewer than n only
// with an error (io.ErrUnexpectedEOF when the Range has fewer left). Same errors as Read.
func (r *Range) WriteMapped(w io.Writer, n int64, buf []byte) (written int64, err error) {
	if r.parts == nil {
		return 0, errRangeClosed
	}
	var cur []byte // the mapping being read
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if e := recover(); e != nil {
			// Only a fault inside the mapping is the file's doing; anything else is a bug
			// and goes on as the panic it was.
			fault, ok := e.(interface{ Addr() uintptr })
			if !ok || len(cur) == 0 || fault.Addr() < uintptr(unsafe.Pointer(&cur[0])) ||
				fault.Addr()-uintptr(unsafe.Pointer(&cur[0])) >= uintptr(len(cur)) {
				panic(e)
			}
			err = fmt.Errorf("datacache: cached file shrank while being read (fault at %#x): %w", fault.Addr(), io.ErrUnexpectedEOF)
		}
	}()
	for written < n {
		pt := r.next()
		if pt == nil {
			return written, io.ErrUnexpectedEOF
		}
		f, off, avail, err := r.source(pt)
		if err != nil {
			return written, err
		}
		k := min(avail, n-written, mapWriteBytes)
		mem := pt.mapped(f, off)
		var wn int
		if mem == nil {
			if len(buf) == 0 {
				if r.copyBuf == nil {
					r.copyBuf = copyBufs.Get().(*[]byte)
				}
				buf = *r.copyBuf
			}
			m, rerr := r.Read(buf[:min(int64(len(buf)), k)])
			if m == 0 {
				return written, rerr
			}
			wn, err = w.Write(buf[:m])
			written += int64(wn)
			if err != nil {
				return written, err
			}
			continue
		}
		cur = mem
		k = min(k, pt.memOff+int64(len(mem))-off)
		wn, err = w.Write(mem[off-pt.memOff : off-pt.memOff+k])
		pt.off += int64(wn)
		pt.n -= int64(wn)
		r.left -= int64(wn)
		written += int64(wn)
		if pt.n == 0 {
			pt.unmap()
		}
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// mapped returns a read-only mapping of f that holds file offset off (the part's next byte):
// the current one, or a new one of up to mapWindowBytes from the page holding off, not past the
// part's end (pt.memOff is its file offset); nil when f cannot be mapped. The mapping may reach
// past the file's current end (a fill still growing it): only verified bytes, which are in the
// file, are read through it.
func (pt *part) mapped(f *os.File, off int64) []byte {
	if pt.memOf == f && pt.mem != nil && off >= pt.memOff && off < pt.memOff+int64(len(pt.mem)) {
		return pt.mem
	}
	pt.unmap()
	start := off &^ pageMask
	sc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var mem []byte
	_ = sc.Control(func(fd uintptr) {
		mem, err = syscall.Mmap(int(fd), start, int(min(off+pt.n, start+mapWindowBytes)-start), syscall.PROT_READ, syscall.MAP_SHARED)
	})
	if err != nil {
		return nil
	}
	pt.mem, pt.memOf, pt.memOff = mem, f, start
	return mem
}

// unmap drops the part's mapping, if any.
func (pt *part) unmap() {
	if pt.mem != nil {
		_ = syscall.Munmap(pt.mem)
	}
	pt.mem, pt.memOf, pt.memOff = nil, nil, 0
}
