package recon

import (
	"errors"
	"fmt"
	"io"
	"math"
)

// ErrNotWhole is returned by EncodeTerms for an answer planned with a range.
var ErrNotWhole = errors.New("recon: answer is not a whole-file plan")

// Terms is the encoded "terms" array of a file's whole-file answer, kept so that later answers
// of the same record need not encode terms again. A term's JSON depends only on the term (its
// xorb hash, chunk range and length), never on the range asked or on URLs, so:
//
//   - Prefix followed by Encoder.AppendRestV2 (or V1) is the whole-file answer, byte for byte
//     what WriteV2 (WriteV1) writes for the same Answer and Signer;
//   - for a ranged answer of the same record, every emitted term except the first and the last
//     (which Plan may narrow) is a contiguous piece of Prefix, and Encoder.WriteV2Terms
//     (WriteV1Terms) writes that piece as it is.
//
// A Terms is immutable and safe for concurrent use; it aliases the record's terms.
type Terms struct {
	// b is `{"offset_into_first_range":0,"terms":[` followed by every term, each but the first
	// preceded by a comma.
	b []byte
	// off[k] is where the record's term k starts in b (its comma included); off[n] = len(b).
	off []uint32
	// terms is the record's term slice, to recognise answers planned from the same record.
	terms []Term
}

// EncodeTerms encodes the terms of a, which must be a whole-file answer (Plan without a
// range): ErrNotWhole otherwise. Encodings past 4 GiB are refused.
func EncodeTerms(a *Answer) (*Terms, error) {
	if !a.whole {
		return nil, ErrNotWhole
	}
	j := newJob(a, nil, true, 0)
	n := a.Len()
	t := &Terms{off: make([]uint32, 0, n+1), terms: a.terms}
	b := make([]byte, 0, 64+n*termSizeHint)
	b = j.appendHead(b)
	for i := range n {
		if len(b) > math.MaxUint32 {
			return nil, fmt.Errorf("recon: encoded terms of %d bytes", len(b))
		}
		t.off = append(t.off, uint32(len(b)))
		b = j.appendTerms(b, i, i+1)
	}
	if len(b) > math.MaxUint32 {
		return nil, fmt.Errorf("recon: encoded terms of %d bytes", len(b))
	}
	t.off = append(t.off, uint32(len(b)))
	t.b = b
	return t, nil
}

// Prefix is the whole-file answer up to and including its last term: the same for v1 and v2.
// The caller must not modify it.
func (t *Terms) Prefix() []byte { return t.b }

// Size is the memory t holds beyond the record it aliases, in bytes.
func (t *Terms) Size() int64 { return int64(cap(t.b)) + 4*int64(cap(t.off)) + 64 }

// middle returns the encoding of a's emitted terms [1, Len()-1) when a was planned from the
// record t was encoded from and has at least three terms; nil otherwise.
func (t *Terms) middle(a *Answer) []byte {
	n := len(a.terms)
	if t == nil || n < 3 || a.first < 0 || a.first+n > len(t.terms) || &t.terms[a.first] != &a.terms[0] {
		return nil
	}
	return t.b[t.off[a.first+1]:t.off[a.first+n-1]]
}

// AppendRestV2 appends what follows the terms in a's v2 answer: `],"xorbs":{…}}`. With
// Terms.Prefix of a whole-file answer it forms the answer WriteV2 writes.
func (e Encoder) AppendRestV2(dst []byte, a *Answer, s Signer) []byte {
	return e.appendRest(dst, a, s, true)
}

// AppendRestV1 is AppendRestV2 for the v1 answer: `],"fetch_info":{…}}`.
func (e Encoder) AppendRestV1(dst []byte, a *Answer, s Signer) []byte {
	return e.appendRest(dst, a, s, false)
}

func (e Encoder) appendRest(dst []byte, a *Answer, s Signer, v2 bool) []byte {
	j := newJob(a, s, v2, e.MaxRanges)
	dst = j.appendMid(dst)
	dst = j.appendXorbs(dst, 0, len(a.Xorbs))
	return append(dst, "}}"...)
}

// WriteV2Terms is WriteV2 with the terms of a taken from t where it can: byte-identical output,
// with every term but the first and the last copied from t when a was planned (with or without
// a range) from the record t was encoded from. Otherwise, or with Workers > 1 and no match, it
// behaves as WriteV2. The answer is written serially.
func (e Encoder) WriteV2Terms(w io.Writer, a *Answer, s Signer, t *Terms) error {
	return e.writeTerms(w, a, s, t, true)
}

// WriteV1Terms is WriteV2Terms for the v1 answer.
func (e Encoder) WriteV1Terms(w io.Writer, a *Answer, s Signer, t *Terms) error {
	return e.writeTerms(w, a, s, t, false)
}

func (e Encoder) writeTerms(w io.Writer, a *Answer, s Signer, t *Terms, v2 bool) error {
	m := t.middle(a)
	if m == nil {
		return e.write(w, a, s, v2)
	}
	j := newJob(a, s, v2, e.MaxRanges)
	j.middle = m
	return j.writeSerial(w)
}
