package datacache

import (
	"container/list"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// On-disk layout under Options.Dir:
//
//	Dir/
//	├── tmp/                              fills being written (emptied by Open)
//	└── segments/
//	    └── {h[0:2]}/                     first two characters of the xorb hash
//	        └── {h}.{start}.{length}      stored bytes [start, start+length) of xorb h
//
// {h} is the protocol string form of the xorb hash; {start} and {length} are decimal. The start
// offset names the segment independently of the segment size, so a changed SegmentBytes leaves
// only unused files behind, which the LRU evicts. A file appears under segments/ only by rename
// after its bytes were verified (not fsynced: after a crash a file may be short, which Open
// removes, or hold lost bytes); its bytes are verified again, lazily, on first use after a
// restart, so a damaged file is dropped and refilled, never served.

const (
	segmentsDir = "segments"
	tmpDir      = "tmp"
)

// key names one cached segment.
type key struct {
	h          hash.Hash
	start, len int64
}

func (k key) String() string {
	return k.h.String() + "." + strconv.FormatInt(k.start, 10) + "." + strconv.FormatInt(k.len, 10)
}

// relPath is the segment's path relative to Dir.
func (k key) relPath() string {
	s := k.h.String()
	return filepath.Join(segmentsDir, s[:2], k.String())
}

// errName: a file name under segments/ that this package did not write.
var errName = errors.New("datacache: not a segment file name")

// parseName is the inverse of key.String. It accepts exactly the canonical form (lowercase
// hash, decimal numbers without sign or leading zeros, length > 0).
func parseName(name string) (key, error) {
	hs, rest, ok := strings.Cut(name, ".")
	if !ok {
		return key{}, fmt.Errorf("%w: %q", errName, name)
	}
	ss, ls, ok := strings.Cut(rest, ".")
	if !ok {
		return key{}, fmt.Errorf("%w: %q", errName, name)
	}
	h, err := hash.Parse(hs)
	if err != nil {
		return key{}, fmt.Errorf("%w: %q: %w", errName, name, err)
	}
	start, err1 := parseDecimal(ss)
	n, err2 := parseDecimal(ls)
	if err1 != nil || err2 != nil || n == 0 {
		return key{}, fmt.Errorf("%w: %q", errName, name)
	}
	k := key{h: h, start: start, len: n}
	if k.String() != name { // uppercase hex and other aliases
		return key{}, fmt.Errorf("%w: %q is not canonical", errName, name)
	}
	return k, nil
}

func parseDecimal(s string) (int64, error) {
	if s == "" || len(s) > 12 || (len(s) > 1 && s[0] == '0') {
		return 0, errName
	}
	var v int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errName
		}
		v = v*10 + int64(s[i]-'0')
	}
	return v, nil
}

// entry is one segment file known to the index.
type entry struct {
	k        key
	elem     *list.Element
	verified bool // bytes checked against a layout by this process
}

// index is the in-memory LRU over the segment files, accounted in bytes. It is safe for
// concurrent use. Files are renamed in and unlinked under its lock, so the index and the
// directory agree except for files removed behind our back (readers then refill).
type index struct {
	dir string
	max int64
	seg int64 // the cache's SegmentBytes: bySeg's unit

	mu      sync.Mutex
	entries map[key]*entry
	lru     *list.List // front: most recently used; values are *entry
	used    int64
	// bySeg finds the entry of segment start/seg of a xorb without its layout (cachedAt): the
	// last inserted one when files of another segment size share the number.
	bySeg map[segID]*entry
}

// segID names segment n of xorb h (n = first stored byte / SegmentBytes).
type segID struct {
	h hash.Hash
	n int64
}

func newIndex(dir string, max, seg int64) *index {
	return &index{dir: dir, max: max, seg: seg, entries: make(map[key]*entry), lru: list.New(),
		bySeg: make(map[segID]*entry)}
}

func (x *index) path(k key) string { return filepath.Join(x.dir, k.relPath()) }

// tmp is the directory fills are written in before their rename.
func (x *index) tmp() string { return filepath.Join(x.dir, tmpDir) }

// get returns whether k is cached and verified, and marks it used.
func (x *index) get(k key) (present, verified bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.entries[k]
	if !ok {
		return false, false
	}
	x.lru.MoveToFront(e.elem)
	return true, e.verified
}

// markVerified records that k's bytes passed verification.
func (x *index) markVerified(k key) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e, ok := x.entries[k]; ok {
		e.verified = true
	}
}

// drop forgets k and removes its file; it returns whether k was indexed.
func (x *index) drop(k key) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.entries[k]
	if !ok {
		return false
	}
	x.removeLocked(e)
	return true
}

// removeLocked forgets e and unlinks its file. A reader that opened the file before keeps
// reading it; one that opens it after gets fs.ErrNotExist and refills.
func (x *index) removeLocked(e *entry) {
	x.forgetLocked(e)
	_ = os.Remove(x.path(e.k)) // already gone is fine
}

func (x *index) forgetLocked(e *entry) {
	x.lru.Remove(e.elem)
	delete(x.entries, e.k)
	x.used -= e.k.len
	if id := (segID{e.k.h, e.k.start / x.seg}); x.bySeg[id] == e {
		delete(x.bySeg, id)
	}
}

// commit renames the complete, verified temp file to k's place and indexes it as verified, then
// evicts least recently used segments until the budget holds. It returns the evicted count.
func (x *index) commit(k key, tmp string) (int, error) {
	final := x.path(k)
	x.mu.Lock()
	defer x.mu.Unlock()
	// The rename first: its directory exists for all but the first segment of each of the 256
	// hash prefixes (a MkdirAll before every rename was a stat per fill).
	err := rename(tmp, final)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(final), 0o755); err == nil {
			err = rename(tmp, final)
		}
	}
	if err != nil {
		return 0, err
	}
	if e, ok := x.entries[k]; ok { // the same verified bytes were there already; keep one entry
		x.forgetLocked(e)
	}
	x.insertLocked(k, true)
	return x.evictLocked(), nil
}

func (x *index) insertLocked(k key, verified bool) {
	e := &entry{k: k, verified: verified}
	e.elem = x.lru.PushFront(e)
	x.entries[k] = e
	x.used += k.len
	x.bySeg[segID{k.h, k.start / x.seg}] = e
}

// cachedAt reports whether the chunk of xorb h that starts at stored byte off lies in a
// segment file that is indexed and verified, without a layout and without marking it used.
// A chunk belongs to segment off/seg (segmentSpan), so one map lookup answers.
func (x *index) cachedAt(h hash.Hash, off int64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.bySeg[segID{h, off / x.seg}]
	return e != nil && e.verified && e.k.start <= off && off < e.k.start+e.k.len
}

func (x *index) evictLocked() int {
	n := 0
	for x.used > x.max && x.lru.Len() > 0 {
		x.removeLocked(x.lru.Back().Value.(*entry))
		n++
	}
	return n
}

// bytes is the total length of the indexed segment files.
func (x *index) bytes() int64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.used
}

// found is a segment file seen by load.
type found struct {
	k   key
	mod time.Time
}

// load prepares Dir (creating it, emptying tmp/) and indexes the complete segment files it
// holds, oldest modification first so that the LRU order approximates the last run's fill
// order. Files with names this package does not write, or whose size differs from their name,
// are removed. It returns the number of files evicted to meet the budget and of files removed.
func (x *index) load() (evicted, removed int, err error) {
	if err := os.RemoveAll(filepath.Join(x.dir, tmpDir)); err != nil {
		return 0, 0, err
	}
	for _, d := range []string{tmpDir, segmentsDir} {
		if err := os.MkdirAll(filepath.Join(x.dir, d), 0o755); err != nil {
			return 0, 0, err
		}
	}
	var all []found
	root := filepath.Join(x.dir, segmentsDir)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		k, perr := parseName(d.Name())
		info, ierr := d.Info()
		if perr != nil || ierr != nil || !info.Mode().IsRegular() || info.Size() != k.len ||
			filepath.Join(x.dir, k.relPath()) != p {
			removed++
			return os.Remove(p)
		}
		all = append(all, found{k: k, mod: info.ModTime()})
		return nil
	})
	if err != nil {
		return 0, removed, err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mod.Before(all[j].mod) })
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, f := range all {
		x.insertLocked(f.k, false)
	}
	return x.evictLocked(), removed, nil
}
