package datacache

import (
	"os"

	"golang.org/x/sys/unix"
)

// preallocate reserves n bytes of disk for a fill's temp file before its first write, without
// changing the file's size (FALLOC_FL_KEEP_SIZE): the size still grows only with verified bytes
// (readers and a crash see no unverified tail). Without it every pwrite of a fill extends the
// file and ext4 allocates its blocks one write at a time: ~0.37 CPU-s of pwrite per cold GiB,
// 0.235 with the space reserved up front (perf/BENCHMARKS.md, "fill CPU: preallocated segment
// files"). Best effort: a file system that cannot (EOPNOTSUPP) or a full disk (ENOSPC; the
// writes then fail as before) only loses the saving.
func preallocate(f *os.File, n int64) {
	if n <= 0 {
		return
	}
	for {
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, n)
		if err != unix.EINTR {
			return
		}
	}
}
