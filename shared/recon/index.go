package recon

import (
	"slices"
	"sort"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// blockTerms is the number of terms per prefix-sum sample of a termIndex: Plan binary-searches
// the samples, then walks at most blockTerms terms. 64 keeps the samples at 1/8 byte per term.
const blockTerms = 64

// termIndex is what Plan derives from a record's terms: the distinct xorbs as small integers and
// sampled file offsets. It is immutable once built and shared by every Plan of the record.
//
// Memory: 4 bytes per term, 32 per distinct xorb, 8 per blockTerms terms.
type termIndex struct {
	first *Term       // &Terms[0] of the term slice it was built for (nil when empty)
	xorbs []hash.Hash // distinct xorbs of the terms, in first-use order
	xorb  []int32     // xorb[i] is the index in xorbs of term i's xorb
	ends  []uint64    // ends[k]: file offset just past term min(blockTerms*(k+1), len)-1
}

// indexTerms builds the index of terms (used for records assembled without NewFileRecord or
// UnmarshalFileRecord, and by NewFileRecord).
func indexTerms(terms []Term) *termIndex {
	ix := &termIndex{xorb: make([]int32, len(terms)), xorbs: make([]hash.Hash, 0, min(len(terms), linearXorbs))}
	// The distinct xorbs are searched in place while there are few (most files: a shard
	// check builds a record per file, and a map per record was most of its cost), through a
	// map from linearXorbs on.
	var seen map[hash.Hash]int32
	for i := range terms {
		h := &terms[i].Xorb
		if i > 0 && *h == terms[i-1].Xorb {
			ix.xorb[i] = ix.xorb[i-1]
			continue
		}
		x, ok := int32(0), false
		if seen != nil {
			x, ok = seen[*h]
		} else if j := slices.Index(ix.xorbs, *h); j >= 0 {
			x, ok = int32(j), true
		}
		if !ok {
			x = int32(len(ix.xorbs))
			ix.xorbs = append(ix.xorbs, *h)
			if seen != nil {
				seen[*h] = x
			} else if len(ix.xorbs) > linearXorbs {
				seen = make(map[hash.Hash]int32, min(len(terms), 1024))
				for j := range ix.xorbs {
					seen[ix.xorbs[j]] = int32(j)
				}
			}
		}
		ix.xorb[i] = x
	}
	ix.sample(terms)
	return ix
}

// linearXorbs is how many distinct xorbs indexTerms searches without a map.
const linearXorbs = 16

// sample fills ix.first and ix.ends from terms.
func (ix *termIndex) sample(terms []Term) {
	if len(terms) == 0 {
		return
	}
	ix.first = &terms[0]
	ix.ends = make([]uint64, 0, (len(terms)+blockTerms-1)/blockTerms)
	var pos uint64
	for i := range terms {
		pos += uint64(terms[i].RawBytes)
		if i%blockTerms == blockTerms-1 || i == len(terms)-1 {
			ix.ends = append(ix.ends, pos)
		}
	}
}

// index returns the record's term index: the one attached by NewFileRecord or
// UnmarshalFileRecord when it still describes f.Terms, otherwise one built for this call.
func (f *FileRecord) index() *termIndex {
	if ix := f.ix; ix != nil && len(ix.xorb) == len(f.Terms) && (len(f.Terms) == 0 || ix.first == &f.Terms[0]) {
		return ix
	}
	return indexTerms(f.Terms)
}

// find returns the first term i, and the file offset where it starts, such that the terms up to
// and including i hold more than off bytes (strict) or at least off bytes (!strict). ok is false
// when there is no such term (off is past the terms' total).
func (ix *termIndex) find(terms []Term, off uint64, strict bool) (i int, pos uint64, ok bool) {
	k := sort.Search(len(ix.ends), func(k int) bool {
		if strict {
			return ix.ends[k] > off
		}
		return ix.ends[k] >= off
	})
	i = k * blockTerms
	if k > 0 {
		pos = ix.ends[k-1]
	}
	for ; i < len(terms); i++ {
		next := pos + uint64(terms[i].RawBytes)
		if next > off || (!strict && next == off) {
			return i, pos, true
		}
		pos = next
	}
	return 0, 0, false
}
