package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/xetcdn/xetcdn/perf/fixture"
	"github.com/xetcdn/xetcdn/perf/trace"
	"github.com/xetcdn/xetcdn/shared/xet/chunk"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// The lower bound of an upload's bytes (perf/README.md, "new-chunk bytes"): the bytes of the
// distinct chunks of the uploaded file (shared/xet/chunk, the chunker every client must use)
// that no file already on the server holds. Whatever a client and a server do, those chunks
// have to be sent; xorb framing and the shard come on top.
//
// "Already on the server" is decided from the trace, not from timing, so the bound is the same
// in every run of a trace: for an upload of version v of a file, the preloaded versions of that
// file (uploaded before the clock starts, whatever their number), every version u < v of it the
// replay has (the replayer uploads v once v-1 is in, and v-1 once v-2 is in, and so on), and v
// itself when an earlier line of the trace uploads it too. Files of other names never share a
// chunk with it (the generator's bytes are pseudo-random per repository and file), so they are
// not chunked. Where the chain has a gap (v-1 preloaded, v-2 uploaded by the trace), v-2 may
// still be in flight when v starts; it counts as on the server, which can only lower the bound.

// chunkSet is the distinct chunks of one file version: hash -> length.
type chunkSet map[hash.Hash]int

// chunkSetOf chunks a file version.
func chunkSetOf(c trace.Content) (chunkSet, error) {
	chunks, _, err := chunk.HashAll(c.Reader())
	if err != nil {
		return nil, fmt.Errorf("chunking %s: %w", c, err)
	}
	s := make(chunkSet, len(chunks))
	for _, ch := range chunks {
		s[ch.Hash] = ch.Len
	}
	return s, nil
}

// newChunkBytes computes the lower bound of every upload line of recs (indexed as recs) and the
// bytes it chunked. files holds every file version of the replay, with preload set as the
// replayer decides it.
func newChunkBytes(ctx context.Context, recs []trace.Record, files map[trace.FileKey]*fileState) (map[int]int64, int64, error) {
	type fileID struct{ repo, file string }
	uploads := map[fileID][]int{} // file -> indices of its upload lines, in trace order
	for i, rec := range recs {
		if rec.Op == trace.Upload {
			id := fileID{rec.Repo, rec.File}
			uploads[id] = append(uploads[id], i)
		}
	}
	// Every version of an uploaded file that the replay has is chunked, once.
	var keys []trace.FileKey
	var chunked int64
	for k, s := range files {
		if _, ok := uploads[fileID{k.Repo, k.File}]; ok {
			keys = append(keys, k)
			chunked += s.content.Size
		}
	}
	sets := make(map[trace.FileKey]chunkSet, len(keys))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(2) // HashAll hashes in parallel itself
	for _, k := range keys {
		g.Go(func() error {
			if gctx.Err() != nil {
				return gctx.Err()
			}
			s, err := chunkSetOf(files[k].content)
			if err != nil {
				return err
			}
			mu.Lock()
			sets[k] = s
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, 0, err
	}
	out := map[int]int64{}
	for id, idx := range uploads {
		var pre []trace.FileKey
		for _, k := range keys {
			if k.Repo == id.repo && k.File == id.file && files[k].preload {
				pre = append(pre, k)
			}
		}
		for n, i := range idx {
			rec := recs[i]
			on := slices.Clone(pre)
			for _, k := range keys {
				if k.Repo == id.repo && k.File == id.file && k.Version < rec.Version {
					on = append(on, k)
				}
			}
			for _, j := range idx[:n] {
				if recs[j].Version == rec.Version {
					on = append(on, trace.FileKey{Repo: rec.Repo, File: rec.File, Version: rec.Version})
				}
			}
			var b int64
			for h, l := range sets[trace.FileKey{Repo: rec.Repo, File: rec.File, Version: rec.Version}] {
				if !onServer(h, on, sets) {
					b += int64(l)
				}
			}
			out[i] = b
		}
	}
	return out, chunked, nil
}

func onServer(h hash.Hash, on []trace.FileKey, sets map[trace.FileKey]chunkSet) bool {
	for _, k := range on {
		if _, ok := sets[k][h]; ok {
			return true
		}
	}
	return false
}

// selfCPU is the replayer's own CPU time so far (0 where /proc cannot say).
func selfCPU() time.Duration {
	d, _ := fixture.ProcCPU(os.Getpid())
	return d
}
