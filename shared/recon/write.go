package recon

import (
	"io"
	"sync"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Signer produces the URL of a transfer route that serves the given closed byte ranges of a
// stored xorb. AppendURL appends the URL to dst and returns the extended slice. It must be safe
// for concurrent use when an Encoder with Workers > 1 uses it.
type Signer interface {
	AppendURL(dst []byte, xorb hash.Hash, ranges []ByteRange) []byte
}

// DefaultMaxRanges is the number of ranges per v2 fetch entry when Encoder.MaxRanges is 0.
// 256 ranges of 32-bit byte offsets keep a compact signed URL well under 8 KiB.
const DefaultMaxRanges = 256

// flushAt is the buffered size at which the serial writer hands bytes to the io.Writer.
const flushAt = 64 << 10

// Encoder writes answers as JSON. The zero value is usable: DefaultMaxRanges, one goroutine.
// An Encoder is a plain value and safe for concurrent use.
type Encoder struct {
	// MaxRanges bounds the ranges of one v2 fetch entry (one signed URL); 0 means
	// DefaultMaxRanges. A xorb with more merged ranges gets several entries.
	MaxRanges int
	// Workers is the number of goroutines that encode pieces of the answer (the caller holds
	// the permits for them); 0 or 1 means the calling goroutine only. With Workers > 1 the whole
	// answer is buffered in memory before it is written, and the output is byte-identical to the
	// serial one. Write methods return only after every goroutine they started has finished.
	Workers int
}

// WriteV2 writes a as a QueryReconstructionResponseV2 with default settings.
func WriteV2(w io.Writer, a *Answer, s Signer) error { return Encoder{}.WriteV2(w, a, s) }

// WriteV1 writes a as a QueryReconstructionResponse (v1) with default settings.
func WriteV1(w io.Writer, a *Answer, s Signer) error { return Encoder{}.WriteV1(w, a, s) }

// WriteV2 writes the v2 answer (docs/protocol.md §2.3):
//
//	{"offset_into_first_range":N,"terms":[{"hash":H,"unpacked_length":N,"range":{"start":N,"end":N}},…],
//	 "xorbs":{H:[{"url":U,"ranges":[{"chunks":{"start":N,"end":N},"bytes":{"start":N,"end":N}},…]},…],…}}
//
// Xorbs appear in a.Xorbs order; each xorb's ranges are split into entries of at most MaxRanges.
// The only errors are those of w.
func (e Encoder) WriteV2(w io.Writer, a *Answer, s Signer) error {
	return e.write(w, a, s, true)
}

// WriteV1 writes the v1 answer: the same offset and terms, and "fetch_info" with one entry per
// merged range, each with its own URL:
//
//	"fetch_info":{H:[{"range":{"start":N,"end":N},"url":U,"url_range":{"start":N,"end":N}},…],…}
func (e Encoder) WriteV1(w io.Writer, a *Answer, s Signer) error {
	return e.write(w, a, s, false)
}

// job is everything the piece encoders share.
type job struct {
	a         *Answer
	s         Signer
	v2        bool
	maxRanges int
	// middle, when not nil, is the encoding of emitted terms [1, Len()-1), taken from Terms.
	middle []byte
	// prefixes holds, per element of a.Xorbs, the start of a term with that xorb:
	// {"hash":"<64 hex digits>","unpacked_length": (termPrefixLen bytes; hex at hexAt). It is
	// nil for AppendTerms, which formats each term's prefix in place.
	prefixes []byte
}

const (
	termPrefixHead = `{"hash":"`
	termPrefixTail = `","unpacked_length":`
	hexAt          = len(termPrefixHead)
	termPrefixLen  = hexAt + 2*hash.Size + len(termPrefixTail)
)

// prefix is the term prefix of a.Xorbs[x]; hex is the string form of its hash.
func (j *job) prefix(x int) []byte { return j.prefixes[termPrefixLen*x : termPrefixLen*(x+1)] }
func (j *job) hex(x int) []byte {
	return j.prefixes[termPrefixLen*x+hexAt : termPrefixLen*x+hexAt+2*hash.Size]
}

// newJob prepares the shared state of one answer's encoding.
func newJob(a *Answer, s Signer, v2 bool, maxRanges int) *job {
	j := &job{a: a, s: s, v2: v2, maxRanges: maxRanges}
	if j.maxRanges <= 0 {
		j.maxRanges = DefaultMaxRanges
	}
	j.prefixes = make([]byte, 0, termPrefixLen*len(a.Xorbs))
	for i := range a.Xorbs {
		j.prefixes = appendTermPrefix(j.prefixes, a.Xorbs[i].Hash)
	}
	return j
}

// appendTermPrefix appends the start of a term with xorb h, up to its unpacked length.
func appendTermPrefix(b []byte, h hash.Hash) []byte {
	b = append(b, termPrefixHead...)
	b = h.AppendString(b)
	return append(b, termPrefixTail...)
}

func (e Encoder) write(w io.Writer, a *Answer, s Signer, v2 bool) error {
	j := newJob(a, s, v2, e.MaxRanges)
	if e.Workers > 1 && a.Len() > 1 {
		return j.writeParallel(w, e.Workers)
	}
	return j.writeSerial(w)
}

// serialBufs recycles writeSerial's buffers: without it every answer not written from a cache
// (a ranged answer, an origin answer) allocated 68 KiB however small it was, most of the
// garbage of a reconstruction at 1,000 answers/s. io.Writer must not retain what it is given,
// so a buffer is free again once writeSerial returns.
var serialBufs = sync.Pool{New: func() any { b := make([]byte, 0, flushAt+4096); return &b }}

func (j *job) writeSerial(w io.Writer) error {
	bp := serialBufs.Get().(*[]byte)
	buf := (*bp)[:0]
	defer func() {
		if cap(buf) <= 2*(flushAt+4096) { // a buffer grown by a large last piece is dropped
			*bp = buf[:0]
			serialBufs.Put(bp)
		}
	}()
	var err error
	flush := func() {
		if err == nil && len(buf) > 0 {
			_, err = w.Write(buf)
		}
		buf = buf[:0]
	}
	buf = j.appendHead(buf)
	if n := j.a.Len(); j.middle != nil {
		buf = j.appendTerms(buf, 0, 1)
		if len(j.middle) < flushAt {
			buf = append(buf, j.middle...)
		} else {
			flush()
			if err == nil {
				_, err = w.Write(j.middle)
			}
		}
		buf = j.appendTerms(buf, n-1, n)
	} else {
		const batch = 256
		for i := 0; i < n && err == nil; i += batch {
			buf = j.appendTerms(buf, i, min(i+batch, n))
			if len(buf) >= flushAt {
				flush()
			}
		}
	}
	buf = j.appendMid(buf)
	for x := 0; x < len(j.a.Xorbs) && err == nil; x++ {
		buf = j.appendXorbs(buf, x, x+1)
		if len(buf) >= flushAt {
			flush()
		}
	}
	buf = append(buf, "}}"...)
	flush()
	return err
}

// writeParallel splits the terms and the xorbs into k pieces each, encodes piece i of both on
// goroutine i, and writes the pieces in order as they complete.
func (j *job) writeParallel(w io.Writer, k int) error {
	n := j.a.Len()
	k = min(k, n)
	termCut := make([]int, k+1)
	for i := range termCut {
		termCut[i] = n * i / k
	}
	xorbCut := j.xorbCuts(k)
	type out struct {
		terms, xorbs []byte
		done         chan struct{}
	}
	outs := make([]out, k)
	var wg sync.WaitGroup
	for i := range outs {
		outs[i].done = make(chan struct{})
		wg.Add(1)
		go func(o *out, t0, t1, x0, x1 int) {
			defer wg.Done()
			defer close(o.done)
			o.terms = j.appendTerms(make([]byte, 0, (t1-t0)*termSizeHint), t0, t1)
			o.xorbs = j.appendXorbs(make([]byte, 0, j.xorbSizeHint(x0, x1)), x0, x1)
		}(&outs[i], termCut[i], termCut[i+1], xorbCut[i], xorbCut[i+1])
	}
	defer wg.Wait()
	if _, err := w.Write(j.appendHead(nil)); err != nil {
		return err
	}
	for i := range outs {
		<-outs[i].done
		if _, err := w.Write(outs[i].terms); err != nil {
			return err
		}
		outs[i].terms = nil
	}
	if _, err := w.Write(j.appendMid(nil)); err != nil {
		return err
	}
	for i := range outs {
		if _, err := w.Write(outs[i].xorbs); err != nil {
			return err
		}
		outs[i].xorbs = nil
	}
	_, err := w.Write([]byte("}}"))
	return err
}

// termSizeHint is a typical encoded term, to size piece buffers.
const termSizeHint = 150

// xorbSizeHint estimates the encoded size of a.Xorbs[from:to]: about 100 bytes per range (its
// JSON and its part of a URL) and 300 per xorb (key, URL base, signature).
func (j *job) xorbSizeHint(from, to int) int {
	n := 0
	for x := from; x < to; x++ {
		n += 300 + 100*len(j.a.Xorbs[x].Chunks)
	}
	return n
}

// xorbCuts splits a.Xorbs into k contiguous pieces with about the same number of ranges each.
func (j *job) xorbCuts(k int) []int {
	cuts := make([]int, k+1)
	total := j.a.NumRanges()
	x, acc := 0, 0
	for i := 1; i < k; i++ {
		target := total * i / k
		for x < len(j.a.Xorbs) && acc < target {
			acc += len(j.a.Xorbs[x].Chunks)
			x++
		}
		cuts[i] = x
	}
	cuts[k] = len(j.a.Xorbs)
	return cuts
}

func (j *job) appendHead(b []byte) []byte {
	b = append(b, `{"offset_into_first_range":`...)
	b = appendUint(b, j.a.Offset)
	return append(b, `,"terms":[`...)
}

func (j *job) appendMid(b []byte) []byte {
	if j.v2 {
		return append(b, `],"xorbs":{`...)
	}
	return append(b, `],"fetch_info":{`...)
}

// AppendTerms appends emitted terms [from, to) of a (0 <= from <= to <= a.Len()) as the
// objects of a "terms" array, each preceded by a comma except term 0:
//
//	{"hash":H,"unpacked_length":N,"range":{"start":N,"end":N}}
//
// These are the bytes WriteV1 and WriteV2 write for the same terms; a caller that writes
// several answers' terms into one document (the batch answer) brackets them itself.
func AppendTerms(dst []byte, a *Answer, from, to int) []byte {
	j := job{a: a} // no prefix table: each term's hash is formatted in place
	return j.appendTerms(dst, from, to)
}

// appendTerms encodes emitted terms [from, to), each preceded by a comma except term 0. Term
// prefixes come from j.prefixes when newJob built them, else are formatted per term.
func (j *job) appendTerms(b []byte, from, to int) []byte {
	a := j.a
	for i := from; i < to; i++ {
		t := a.term(i)
		if i > 0 {
			b = append(b, ',')
		}
		if j.prefixes != nil {
			b = append(b, j.prefix(int(a.fetchIndex(i)))...)
		} else {
			b = appendTermPrefix(b, t.Xorb)
		}
		b = appendUint(b, uint64(t.RawBytes))
		b = append(b, `,"range":{"start":`...)
		b = appendUint(b, uint64(t.Start))
		b = append(b, `,"end":`...)
		b = appendUint(b, uint64(t.End))
		b = append(b, "}}"...)
	}
	return b
}

// appendXorbs encodes the map members of a.Xorbs[from:to], each preceded by a comma except
// the first xorb.
func (j *job) appendXorbs(b []byte, from, to int) []byte {
	for x := from; x < to; x++ {
		xf := &j.a.Xorbs[x]
		if x > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, j.hex(x)...)
		b = append(b, `":[`...)
		if j.v2 {
			b = j.appendEntriesV2(b, xf)
		} else {
			b = AppendFetchV1(b, j.s, xf.Hash, xf.Chunks, xf.Bytes)
		}
		b = append(b, ']')
	}
	return b
}

func (j *job) appendEntriesV2(b []byte, xf *XorbFetch) []byte {
	for lo := 0; lo < len(xf.Chunks); lo += j.maxRanges {
		hi := min(lo+j.maxRanges, len(xf.Chunks))
		if lo > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"url":"`...)
		b = appendURL(b, j.s, xf.Hash, xf.Bytes[lo:hi])
		b = append(b, `","ranges":[`...)
		for r := lo; r < hi; r++ {
			if r > lo {
				b = append(b, ',')
			}
			b = append(b, `{"chunks":{"start":`...)
			b = appendUint(b, uint64(xf.Chunks[r].Start))
			b = append(b, `,"end":`...)
			b = appendUint(b, uint64(xf.Chunks[r].End))
			b = append(b, `},"bytes":{"start":`...)
			b = appendUint(b, xf.Bytes[r].Start)
			b = append(b, `,"end":`...)
			b = appendUint(b, xf.Bytes[r].End)
			b = append(b, "}}"...)
		}
		b = append(b, "]}"...)
	}
	return b
}

// AppendFetchV1 appends the v1 fetch entries of xorb h, one per range, each preceded by a comma
// except the first: chunks[i] stored at bytes[i] (closed) becomes
//
//	{"range":{"start":N,"end":N},"url":U,"url_range":{"start":N,"end":N}}
//
// with U the URL s signs for bytes[i] alone. chunks and bytes must have the same length. These
// are the bytes WriteV1 writes inside a xorb's "fetch_info" array for the same ranges.
func AppendFetchV1(dst []byte, s Signer, h hash.Hash, chunks []ChunkRange, bytes []ByteRange) []byte {
	for r := range chunks {
		if r > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"range":{"start":`...)
		dst = appendUint(dst, uint64(chunks[r].Start))
		dst = append(dst, `,"end":`...)
		dst = appendUint(dst, uint64(chunks[r].End))
		dst = append(dst, `},"url":"`...)
		dst = appendURL(dst, s, h, bytes[r:r+1])
		dst = append(dst, `","url_range":{"start":`...)
		dst = appendUint(dst, bytes[r].Start)
		dst = append(dst, `,"end":`...)
		dst = appendUint(dst, bytes[r].End)
		dst = append(dst, "}}"...)
	}
	return dst
}

// appendURL appends the URL s signs as the inside of a JSON string. URLs normally need no
// escaping; when one does, the appended bytes are re-encoded.
func appendURL(b []byte, s Signer, h hash.Hash, ranges []ByteRange) []byte {
	n := len(b)
	b = s.AppendURL(b, h, ranges)
	if needsEscape(b[n:]) {
		return appendEscaped(b[:n], string(b[n:]))
	}
	return b
}

// appendEscaped appends s as the inside of a JSON string. Bytes >= 0x80 are copied as they are
// except invalid UTF-8, which becomes U+FFFD as encoding/json does.
func appendEscaped(b []byte, s string) []byte {
	const hexd = "0123456789abcdef"
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexd[r>>4], hexd[r&0xf])
		default:
			b = append(b, string(r)...)
		}
	}
	return b
}
