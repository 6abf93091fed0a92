//go:build !unix

package objstore

import "os"

// lockTemp has no flock here: a collector tells a live write's temporary file from a crashed
// one's by its age only (RemoveTemps), and a write whose file was removed fails with
// ErrUnavailable (Staged.Commit).
func lockTemp(*os.File) (bool, error) { return true, nil }

func tryLockTemp(*os.File) (bool, error) { return true, nil }
