package hub

import (
	"fmt"
	"testing"
	"time"
)

// TestPutLFSManyRows, on each store: one PutLFS of more files than one statement writes (two
// full statements and a remainder) maps every sha256 to its file and size; a sha256 listed
// twice in the call keeps its first file (and does not fail the statement: Postgres refuses
// to update one row twice in one statement); a sha256 mapped before keeps its file and takes
// the new time.
func TestPutLFSManyRows(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			const scope = "models/acme/lfs"
			t0 := time.Unix(1_800_000_000, 0)
			if err := s.PutLFS(ctx, scope, []LFSFile{{SHA256: "old", File: "file-old", Size: 7}}, t0); err != nil {
				t.Fatal(err)
			}
			var files []LFSFile
			for i := range 2*lfsRowsPerInsert + 17 {
				files = append(files, LFSFile{SHA256: fmt.Sprintf("sha-%d", i), File: fmt.Sprintf("file-%d", i), Size: int64(i)})
			}
			files = append(files, LFSFile{SHA256: "old", File: "file-new", Size: 8})
			// The repeat comes within the first statement's rows.
			files = append(files[:5], append([]LFSFile{{SHA256: "sha-3", File: "file-dup", Size: 99}}, files[5:]...)...)
			t1 := t0.Add(time.Hour)
			if err := s.PutLFS(ctx, scope, files, t1); err != nil {
				t.Fatalf("PutLFS of %d files: %v", len(files), err)
			}
			for i := range 2*lfsRowsPerInsert + 17 {
				f, size, err := s.LFS(ctx, scope, fmt.Sprintf("sha-%d", i))
				if err != nil || f != fmt.Sprintf("file-%d", i) || size != int64(i) {
					t.Fatalf("LFS(sha-%d) = %q, %d, %v; want file-%d, %d", i, f, size, err, i, i)
				}
			}
			if f, size, err := s.LFS(ctx, scope, "old"); err != nil || f != "file-old" || size != 7 {
				t.Fatalf("LFS(old) = %q, %d, %v; want its first file, file-old, 7", f, size, err)
			}
			var at int64
			if err := s.db.QueryRowContext(ctx, s.q(`SELECT at FROM hub_lfs WHERE scope = ? AND sha256 = ?`), scope, "old").Scan(&at); err != nil || at != t1.Unix() {
				t.Fatalf("at of the remapped sha256 = %d, %v; want the new time %d", at, err, t1.Unix())
			}
			if _, _, err := s.LFS(ctx, "models/acme/other", "sha-1"); err != ErrEntryNotFound {
				t.Fatalf("LFS in another scope = %v; want ErrEntryNotFound", err)
			}
		})
	}
}

// TestPutLFSConcurrentOverlap: uploads to one scope sharing files, listed in opposite orders,
// write their rows at the same time; none fails (no deadlock between the two statements) and
// every row ends up mapped.
func TestPutLFSConcurrentOverlap(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			const scope = "models/acme/overlap"
			var up, down []LFSFile
			for i := range 3 * lfsRowsPerInsert {
				up = append(up, LFSFile{SHA256: fmt.Sprintf("sha-%04d", i), File: fmt.Sprintf("file-%d", i), Size: int64(i)})
			}
			for i := len(up) - 1; i >= 0; i-- {
				down = append(down, up[i])
			}
			for round := range 5 {
				at := time.Unix(1_800_000_000+int64(round), 0)
				errs := make(chan error, 2)
				for _, files := range [][]LFSFile{up, down} {
					go func() { errs <- s.PutLFS(ctx, scope, files, at) }()
				}
				for range 2 {
					if err := <-errs; err != nil {
						t.Fatalf("round %d: concurrent PutLFS: %v", round, err)
					}
				}
			}
			for _, f := range up {
				if got, size, err := s.LFS(ctx, scope, f.SHA256); err != nil || got != f.File || size != f.Size {
					t.Fatalf("LFS(%s) = %q, %d, %v; want %q, %d", f.SHA256, got, size, err, f.File, f.Size)
				}
			}
		})
	}
}
