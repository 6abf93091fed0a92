package datacache

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
)

// Cache files are opened with open(2) and os.NewFile instead of os.Open/os.CreateTemp. Both
// give the same *os.File for a regular file, but os.OpenFile first offers every descriptor to
// the runtime's network poller, which regular files cannot join: four fcntl and a failing
// epoll_ctl per file, ~1,000 files per cold GiB (perf/BENCHMARKS.md, 2026-12-02, third pass).
// os.NewFile only asks whether the descriptor is non-blocking (one fcntl); a regular file
// opened here never is, so it stays out of the poller, as os.Open leaves it in the end.

// openFile is os.OpenFile for a regular cache file, without the poller registration.
func openFile(name string, flag int, perm uint32) (*os.File, error) {
	var fd int
	var err error
	for {
		fd, err = syscall.Open(name, flag|syscall.O_CLOEXEC, perm)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// openRead opens a cache file for reading (os.Open).
func openRead(name string) (*os.File, error) { return openFile(name, syscall.O_RDONLY, 0) }

// tempSeq numbers the temp files of fills (createTemp): Open empties the temp directory and a
// Cache owns its directory, so a counter names them uniquely; O_EXCL still guards against a
// stray file of the same name.
var tempSeq atomic.Uint64

// createTemp creates a new temp file for a fill in dir, readable and writable by the owner only
// (as os.CreateTemp).
func createTemp(dir string) (*os.File, error) {
	for try := 0; ; try++ {
		name := filepath.Join(dir, "fill-"+strconv.FormatUint(tempSeq.Add(1), 10))
		f, err := openFile(name, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL, 0o600)
		if err == nil || !errors.Is(err, os.ErrExist) || try == 100 {
			return f, err
		}
	}
}

// rename is os.Rename without its check that newpath is not a directory (an lstat per fill that
// fails with ENOENT for every new segment): a segment's path is never a directory, and
// rename(2) itself refuses to put a file over one.
func rename(oldpath, newpath string) error {
	if err := syscall.Rename(oldpath, newpath); err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}
