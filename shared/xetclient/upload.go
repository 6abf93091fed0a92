package xetclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/xetcdn/xetcdn/shared/xet/chunk"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Global dedup query rules of the stock client (docs/protocol.md §8.6).
const (
	// dedupSpacing is the minimum number of chunks between two global dedup queries of a file.
	dedupSpacing = 256
)

// UploadFile is one input of UploadFiles.
type UploadFile struct {
	// Path is opened when Reader is nil; it is reported in the result either way.
	Path string
	// Reader, when not nil, is read to its end instead of opening Path. UploadFiles does not
	// close it.
	Reader io.Reader
	// Size is the expected length, used only for progress totals (0: unknown; Path is stat'ed).
	Size int64
}

// UploadResult describes one uploaded file.
type UploadResult struct {
	Path     string
	FileHash hash.Hash
	Size     int64
	SHA256   [32]byte // the ordinary digest
	// BytesSent is this file's share of the request bodies sent: the serialized chunks it
	// introduced into new xorbs plus its records in the shard (the shard's fixed records count
	// for the first file of the shard). Chunks deduplicated (earlier in the upload, or by the
	// global dedup route) cost nothing. Summed over all results it is exactly the bytes of the
	// xorb and shard bodies uploaded once each; retried attempts are not counted again.
	BytesSent int64
}

// UploadOptions tune one UploadFiles call.
type UploadOptions struct {
	// Progress, when not nil, is called on the calling goroutine after every chunk with the bytes
	// read so far over all files and the sum of the known sizes.
	Progress func(done, total int64)
}

// UploadFiles uploads files in one session (docs/protocol.md §10) and returns one result per
// file, in order. Files are chunked as streams (memory does not grow with file size beyond 40
// bytes per chunk); chunks already seen in this session or found through the global dedup route
// are referenced, not re-sent; new chunks are packed into xorbs that are uploaded concurrently
// (at most Options.Concurrency at a time) while chunking goes on; after every xorb is accepted,
// the shard registering all files is uploaded (POST /v2/shards, falling back to /v1/shards).
// Files count as uploaded only when UploadFiles returns nil.
func (c *Client) UploadFiles(ctx context.Context, files []UploadFile, opts UploadOptions) ([]UploadResult, error) {
	base, err := c.base(ctx)
	if err != nil {
		return nil, err
	}
	scheme := xorb.Auto
	if c.opts.DisableCompression {
		scheme = xorb.None
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.opts.Concurrency)
	u := &upload{
		c: c, base: base, g: g,
		b:       xorb.NewBuilder(scheme),
		local:   make(map[hash.Hash]chunkRef),
		byKey:   make(map[hash.Hash]map[hash.Hash]chunkRef),
		queried: make(map[hash.Hash]bool),
	}
	u.cur = u.newSessionXorb()
	var total int64
	for _, f := range files {
		if f.Size > 0 {
			total += f.Size
		} else if f.Reader == nil {
			if st, err := os.Stat(f.Path); err == nil && st.Mode().IsRegular() {
				total += st.Size()
			}
		}
	}
	u.progress = func(done int64) {
		if opts.Progress != nil {
			opts.Progress(done, max(total, done))
		}
	}
	u.files = make([]*fileState, len(files))
	for i, f := range files {
		if err := u.addFile(gctx, i, f); err != nil {
			if werr := g.Wait(); werr != nil {
				return nil, werr
			}
			return nil, err
		}
	}
	if u.b.NumChunks() > 0 {
		u.flush(gctx)
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	shards, err := u.buildShards()
	if err != nil {
		return nil, err
	}
	for _, s := range shards {
		if err := c.uploadShard(ctx, base, s.AppendUpload(nil)); err != nil {
			return nil, err
		}
	}
	out := make([]UploadResult, len(files))
	sent := u.attribute(shards)
	for i, f := range u.files {
		out[i] = UploadResult{Path: files[i].Path, FileHash: f.info.FileHash, Size: f.info.Size,
			SHA256: f.info.SHA256, BytesSent: sent[i]}
	}
	return out, nil
}

// upload is the state of one UploadFiles call. Only the calling goroutine touches it; xorb
// uploads run on the errgroup with their own copies of what they need.
type upload struct {
	c        *Client
	base     string
	g        *errgroup.Group
	b        *xorb.Builder
	cur      int // index in xorbs of the xorb being built
	xorbs    []*xorbEntry
	files    []*fileState
	read     int64
	progress func(done int64)
	ring     []byte // the bytes of addFile's held chunks (ringSize)

	// local maps the chunks added to this session's xorbs to where they are.
	local map[hash.Hash]chunkRef
	// keys and byKey index the chunks of global dedup answers: per HMAC key (zero for raw
	// hashes), keyed chunk hash → location. keys keeps first-seen order so lookups are
	// deterministic.
	keys    []hash.Hash
	byKey   map[hash.Hash]map[hash.Hash]chunkRef
	queried map[hash.Hash]bool
}

// xorbEntry is a xorb files of this session may reference: one built here (layout set once it
// is finished) or one named by a global dedup answer (remote).
type xorbEntry struct {
	hash   hash.Hash
	remote bool
	layout *xorb.Layout
	size   int     // serialized body length
	owners []int32 // per chunk, the index of the file that introduced it
}

// chunkRef locates a chunk: chunk index in xorbs[xorb].
type chunkRef struct {
	xorb  int
	index uint32
}

// segment is a run of consecutive chunks of one xorb in a file: a term in the making.
type segment struct {
	xorb       int
	start, end uint32
	raw        uint32
	first      int // index in the file's chunk list of the segment's first chunk
}

type fileState struct {
	info   chunk.FileInfo
	chunks []chunk.Chunk
	segs   []segment
}

func (u *upload) newSessionXorb() int {
	u.xorbs = append(u.xorbs, &xorbEntry{})
	return len(u.xorbs) - 1
}

// addFile chunks one file and assigns every chunk to a xorb.
func (u *upload) addFile(ctx context.Context, idx int, f UploadFile) error {
	r := f.Reader
	if r == nil {
		fh, err := os.Open(f.Path)
		if err != nil {
			return err
		}
		defer fh.Close()
		r = fh
	}
	name := f.Path
	if name == "" {
		name = fmt.Sprintf("file %d", idx)
	}
	h := chunk.NewHasher(r)
	fs := &fileState{}
	u.files[idx] = fs
	u.b.StartFile()
	sinceQuery := dedupSpacing // the first chunk may always be queried
	// Until a dedup answer arrives for this file, its anchor chunks (shard.AnchorPicker) are
	// asked about too, whatever the spacing: xetcdn indexes those of every file, so a new
	// version whose first chunks (or first tensor) changed still finds the previous one (§8.6,
	// [xetcdn]).
	var anchors shard.AnchorPicker
	answered := false
	// New chunks met while anchors are still to be asked about are held back (copied into
	// u.ring, the newest maxHeld bytes) rather than packed: when a later anchor's answer covers
	// them (the chunks between a changed first block and the next anchor), they are referenced,
	// not sent.
	var held []heldChunk
	heldBytes := 0
	// pack adds the oldest k held chunks to the file (referenced when an answer covers them by
	// now, else packed) and drops them from held.
	pack := func(k int) error {
		for _, c := range held[:k] {
			ref, ok := u.local[c.ch.Hash]
			if !ok {
				ref, ok = u.lookupRemote(c.ch.Hash)
			}
			if !ok {
				var err error
				if ref, err = u.addChunk(ctx, c.data, c.ch.Hash, idx); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
			fs.add(ref, uint32(c.ch.Len), c.n)
			heldBytes -= len(c.data)
		}
		clear(held[:k]) // no packed chunk's bytes stay reachable through the array
		held = held[k:] // no copy of the rest per chunk; append reallocates as it runs out
		return nil
	}
	release := func() error { return pack(len(held)) }
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		ch, data, err := h.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		ref, ok := u.local[ch.Hash]
		if !ok {
			ref, ok = u.lookupRemote(ch.Hash)
		}
		anchor := anchors.Next(ch.Hash) && !answered
		if !ok && !u.c.opts.DisableGlobalDedup && !u.queried[ch.Hash] &&
			(anchor || sinceQuery >= dedupSpacing && (n == 0 || ch.Hash.Mod(shard.GlobalDedupModulus) == 0)) {
			sinceQuery = 0
			if u.queryGlobal(ctx, ch.Hash) {
				answered = true
			}
			ref, ok = u.lookupRemote(ch.Hash)
		}
		if ok && !answered && u.xorbs[ref.xorb].remote {
			answered = true // an earlier answer of this session covers the file
		}
		sinceQuery++
		if !ok && !answered && !anchors.Done() && !u.c.opts.DisableGlobalDedup && len(data) <= maxHeld {
			// Room for it: the oldest held chunks are packed first (a changed region longer
			// than maxHeld is sent as it is read, but the unchanged chunks after it, up to the
			// next anchor, are still held). Within maxHeld the ring always has a place for it
			// (ringSize); the place is checked all the same.
			if u.ring == nil {
				u.ring = make([]byte, ringSize)
			}
			off, fits := nextHeldOff(held, len(data), len(u.ring))
			for heldBytes+len(data) > maxHeld || !fits {
				if err := pack(1); err != nil {
					return err
				}
				off, fits = nextHeldOff(held, len(data), len(u.ring))
			}
			buf := u.ring[off : off+len(data) : off+len(data)]
			copy(buf, data)
			held = append(held, heldChunk{ch: ch, data: buf, off: off, n: n})
			heldBytes += len(data)
			u.read += int64(ch.Len)
			u.progress(u.read)
			continue
		}
		if err := release(); err != nil {
			return err
		}
		if !ok {
			if ref, err = u.addChunk(ctx, data, ch.Hash, idx); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		fs.add(ref, uint32(ch.Len), n)
		u.read += int64(ch.Len)
		u.progress(u.read)
	}
	if err := release(); err != nil {
		return err
	}
	info, err := h.Info()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	fs.info = info
	fs.chunks = h.Chunks()
	return nil
}

// maxHeld bounds the bytes of new chunks addFile holds back while a file's anchors are still to
// be asked about (the first shard.FileAnchors are about 64 chunks, 4 MiB, on average; then a
// stride anchor every shard.StrideModulus chunks, 4 MiB, on average, more than 16 MiB apart
// about once in 55): it holds the newest maxHeld bytes, packing the oldest to make room, so the
// chunks between the end of a changed region and the next anchor are held however long the
// region was.
const maxHeld = 16 << 20

// heldChunk is a new chunk held back by addFile: its bytes (a copy, u.ring[off:off+len(data)])
// and index in the file.
type heldChunk struct {
	ch   chunk.Chunk
	data []byte
	off  int
	n    int
}

// ringSize is the length of the buffer (upload.ring, one per UploadFiles call, allocated at the
// first held chunk) that holds the bytes of held chunks, so that holding a chunk copies it
// without allocating: a new upload holds every chunk of a file's first ~256 MiB (until its
// anchors are asked about), which as one allocation per chunk was a heap churn of that size.
//
// The held chunks sit in the ring oldest first, each after the previous one or, when it does
// not fit before the end, at the start (nextHeldOff). With maxHeld plus one of the largest
// chunks (M = chunk.MaxSize) the ring never runs out of room while the held bytes and the new
// chunk (n bytes) stay within maxHeld, as addFile keeps them. Unwrapped (held from head to
// tail): a chunk that does not fit after tail has tail > ringSize - n, and head ≥ tail -
// (maxHeld - n) > M ≥ n, so it fits at the start. Wrapped (head..w, then 0..tail, where w, the
// end of the chunk before the wrap, is > ringSize - M): head ≥ w - (maxHeld - n - tail) > tail
// + n, so it fits after tail. TestNextHeldOff checks it, and that a shorter ring does not.
const ringSize = maxHeld + chunk.MaxSize

// nextHeldOff is where in a ring of size bytes the next held chunk of n bytes goes after the
// held chunks (oldest first, placed by nextHeldOff before), or fits false when it would
// overlap the oldest.
func nextHeldOff(held []heldChunk, n, size int) (off int, fits bool) {
	if len(held) == 0 {
		return 0, n <= size
	}
	last := held[len(held)-1]
	head, tail := held[0].off, last.off+len(last.data)
	if tail > head { // unwrapped: after the newest, or at the start, before the oldest
		if tail+n <= size {
			return tail, true
		}
		return 0, n <= head
	}
	return tail, tail+n <= head // wrapped: between the newest and the oldest
}

// add appends a chunk to the file's segments, extending the last one when the chunk follows it
// in the same xorb.
func (fs *fileState) add(ref chunkRef, n uint32, idx int) {
	if k := len(fs.segs); k > 0 {
		s := &fs.segs[k-1]
		if s.xorb == ref.xorb && s.end == ref.index && uint64(s.raw)+uint64(n) <= math.MaxUint32 {
			s.end++
			s.raw += n
			return
		}
	}
	fs.segs = append(fs.segs, segment{xorb: ref.xorb, start: ref.index, end: ref.index + 1, raw: n, first: idx})
}

// addChunk puts a new chunk into the xorb being built, finishing and uploading that xorb first
// when the chunk does not fit.
func (u *upload) addChunk(ctx context.Context, data []byte, h hash.Hash, file int) (chunkRef, error) {
	if !u.b.Add(data, h) {
		u.flush(ctx)
		if !u.b.Add(data, h) {
			return chunkRef{}, fmt.Errorf("chunk of %d bytes does not fit an empty xorb", len(data))
		}
	}
	e := u.xorbs[u.cur]
	e.owners = append(e.owners, int32(file))
	ref := chunkRef{xorb: u.cur, index: uint32(u.b.NumChunks() - 1)}
	u.local[h] = ref
	return ref, nil
}

// flush finishes the xorb being built and starts its upload. It blocks while Concurrency
// uploads are running, which bounds memory.
func (u *upload) flush(ctx context.Context) {
	body, layout := u.b.Finish()
	e := u.xorbs[u.cur]
	e.hash, e.layout, e.size = layout.Hash, layout, len(body)
	u.cur = u.newSessionXorb()
	u.g.Go(func() error { return u.c.uploadXorb(ctx, u.base, layout.Hash, body) })
}

// lookupRemote finds h among the chunks of the global dedup answers received so far.
func (u *upload) lookupRemote(h hash.Hash) (chunkRef, bool) {
	for _, k := range u.keys {
		kh := h
		if !k.IsZero() {
			kh = hash.HMAC(k, h)
		}
		if ref, ok := u.byKey[k][kh]; ok {
			return ref, true
		}
	}
	return chunkRef{}, false
}

// queryGlobal asks the global dedup route about h and indexes the answer; it reports whether
// an answer came. Failures only mean "no match": global dedup is best effort.
func (u *upload) queryGlobal(ctx context.Context, h hash.Hash) bool {
	u.queried[h] = true
	s, err := u.c.queryDedup(ctx, u.base, h)
	if err != nil || s == nil {
		return false
	}
	var key hash.Hash
	if s.Footer != nil {
		if s.Footer.Expired(time.Now()) {
			return false
		}
		key = s.Footer.HMACKey
	}
	m, ok := u.byKey[key]
	if !ok {
		m = make(map[hash.Hash]chunkRef)
		u.byKey[key] = m
		u.keys = append(u.keys, key)
	}
	for _, x := range s.Xorbs {
		id := len(u.xorbs)
		u.xorbs = append(u.xorbs, &xorbEntry{hash: x.Hash, remote: true})
		for j, ch := range x.Chunks {
			if _, dup := m[ch.Hash]; !dup {
				m[ch.Hash] = chunkRef{xorb: id, index: uint32(j)}
			}
		}
	}
	return true
}

// buildShards turns the session into upload shards of at most shard.MaxSize bytes: every file
// (once per distinct file hash) and every xorb built in this session.
func (u *upload) buildShards() ([]*shard.Shard, error) {
	var files []shard.File
	seen := make(map[hash.Hash]bool)
	for _, fs := range u.files {
		if seen[fs.info.FileHash] {
			continue
		}
		seen[fs.info.FileHash] = true
		f := shard.File{
			Hash:         fs.info.FileHash,
			Terms:        make([]shard.Term, len(fs.segs)),
			Verification: make([]hash.Hash, len(fs.segs)),
		}
		sha := hash.FromSHA256(fs.info.SHA256)
		f.SHA256 = &sha
		hs := make([]hash.Hash, 0, 64)
		for i, s := range fs.segs {
			f.Terms[i] = shard.Term{Xorb: u.xorbs[s.xorb].hash, RawBytes: s.raw, Start: s.start, End: s.end}
			hs = hs[:0]
			for _, ch := range fs.chunks[s.first : s.first+int(s.end-s.start)] {
				hs = append(hs, ch.Hash)
			}
			f.Verification[i] = hash.Verification(hs)
		}
		files = append(files, f)
	}
	var xorbs []shard.Xorb
	for _, e := range u.xorbs {
		if e.remote || e.layout == nil {
			continue
		}
		l := e.layout
		x := shard.Xorb{Hash: l.Hash, RawBytes: l.RawLen(), BytesOnDisk: uint32(e.size),
			Chunks: make([]shard.XorbChunk, len(l.ChunkHashes))}
		var start uint32
		for i, ch := range l.ChunkHashes {
			x.Chunks[i] = shard.XorbChunk{Hash: ch, RawStart: start, RawLen: l.RawEnds[i] - start}
			start = l.RawEnds[i]
		}
		xorbs = append(xorbs, x)
	}
	return splitShards(files, xorbs)
}

// shardOverhead is the header and the two bookends of a footer-less shard.
const shardOverhead = shard.HeaderSize + 2*shard.RecordSize

func fileRecords(f *shard.File) int {
	n := 1 + len(f.Terms) + len(f.Verification)
	if f.SHA256 != nil {
		n++
	}
	return n * shard.RecordSize
}

func xorbRecords(x *shard.Xorb) int { return (1 + len(x.Chunks)) * shard.RecordSize }

// splitShards packs files, then xorbs, greedily into shards of at most shard.MaxSize bytes.
// A shard may hold files whose xorbs another shard describes: the server only requires that
// referenced xorbs exist.
func splitShards(files []shard.File, xorbs []shard.Xorb) ([]*shard.Shard, error) {
	cur := &shard.Shard{}
	out := []*shard.Shard{cur}
	size := shardOverhead
	fit := func(n int) error {
		if shardOverhead+n > shard.MaxSize {
			return fmt.Errorf("a single shard record block of %d bytes exceeds the shard limit", n)
		}
		if size+n > shard.MaxSize {
			cur = &shard.Shard{}
			out = append(out, cur)
			size = shardOverhead
		}
		size += n
		return nil
	}
	for i := range files {
		if err := fit(fileRecords(&files[i])); err != nil {
			return nil, err
		}
		cur.Files = append(cur.Files, files[i])
	}
	for i := range xorbs {
		if err := fit(xorbRecords(&xorbs[i])); err != nil {
			return nil, err
		}
		cur.Xorbs = append(cur.Xorbs, xorbs[i])
	}
	return out, nil
}

// attribute splits the bytes sent over the files (see UploadResult.BytesSent).
func (u *upload) attribute(shards []*shard.Shard) []int64 {
	sent := make([]int64, len(u.files))
	if len(sent) == 0 {
		return sent
	}
	first := make(map[hash.Hash]int) // file hash → first input with it
	for i, fs := range u.files {
		if _, ok := first[fs.info.FileHash]; !ok {
			first[fs.info.FileHash] = i
		}
	}
	owner := make(map[hash.Hash]*xorbEntry)
	for _, e := range u.xorbs {
		if e.remote || e.layout == nil {
			continue
		}
		owner[e.hash] = e
		var prev uint32
		for j, end := range e.layout.StoredEnds {
			sent[e.owners[j]] += int64(end - prev)
			prev = end
		}
	}
	for _, s := range shards {
		head := 0
		if len(s.Files) > 0 {
			head = first[s.Files[0].Hash]
		}
		sent[head] += shardOverhead
		for i := range s.Files {
			sent[first[s.Files[i].Hash]] += int64(fileRecords(&s.Files[i]))
		}
		for i := range s.Xorbs {
			e := owner[s.Xorbs[i].Hash]
			sent[e.owners[0]] += shard.RecordSize
			for _, o := range e.owners {
				sent[o] += shard.RecordSize
			}
		}
	}
	return sent
}
