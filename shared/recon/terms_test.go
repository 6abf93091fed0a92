package recon

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/xetcdn/xetcdn/shared/httprange"
)

// TestTermsIdentical checks that answers written with encoded terms are byte-identical to the
// ones WriteV2/WriteV1 write, for the whole file (Prefix + AppendRest, and WriteV2Terms) and
// for random ranges, and that Terms of another record are ignored.
func TestTermsIdentical(t *testing.T) {
	other, _ := bigAnswer(t, 5, 64, 5*6, true)
	otherWhole, err := Plan(other, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	otherTerms, err := EncodeTerms(otherWhole)
	if err != nil {
		t.Fatal(err)
	}
	for _, interleaved := range []bool{true, false} {
		// Interleaved: 1,200 terms, so that the copied terms exceed the encoder's flush size.
		nx, per := 37, 6
		if interleaved {
			nx, per = 40, 30
		}
		rec, ls := bigAnswer(t, nx, 64, nx*per, interleaved)
		whole, err := Plan(rec, nil, ls.get)
		if err != nil {
			t.Fatal(err)
		}
		terms, err := EncodeTerms(whole)
		if err != nil {
			t.Fatal(err)
		}
		enc := Encoder{MaxRanges: 3}
		for _, v2 := range []bool{true, false} {
			var want bytes.Buffer
			rest := enc.AppendRestV1(nil, whole, testSigner{})
			if v2 {
				err = enc.WriteV2(&want, whole, testSigner{})
				rest = enc.AppendRestV2(nil, whole, testSigner{})
			} else {
				err = enc.WriteV1(&want, whole, testSigner{})
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := append(bytes.Clone(terms.Prefix()), rest...); !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("interleaved=%v v2=%v: Prefix+AppendRest differs from the whole answer", interleaved, v2)
			}
		}
		r := rand.New(rand.NewPCG(7, 8))
		for iter := range 60 {
			var rng *httprange.Range
			switch {
			case iter == 1:
				rng = &httprange.Range{Start: 0, End: rec.Size - 1}
			case iter == 2:
				rng = &httprange.Range{Start: rec.Size - 1, End: rec.Size - 1}
			case iter > 2:
				s := r.Uint64N(rec.Size)
				rng = &httprange.Range{Start: s, End: s + r.Uint64N(rec.Size/uint64(1+iter%5))}
			}
			ans, err := Plan(rec, rng, ls.get)
			if err != nil {
				t.Fatal(err)
			}
			for _, v2 := range []bool{true, false} {
				write := func(w *bytes.Buffer, tt *Terms, e Encoder) error {
					if tt == nil && v2 {
						return e.WriteV2(w, ans, testSigner{})
					} else if tt == nil {
						return e.WriteV1(w, ans, testSigner{})
					} else if v2 {
						return e.WriteV2Terms(w, ans, testSigner{}, tt)
					}
					return e.WriteV1Terms(w, ans, testSigner{}, tt)
				}
				var want bytes.Buffer
				if err := write(&want, nil, enc); err != nil {
					t.Fatal(err)
				}
				for _, tc := range []struct {
					name string
					tt   *Terms
					e    Encoder
				}{{"own", terms, enc}, {"other record", otherTerms, enc}, {"own, 3 workers", terms, Encoder{MaxRanges: 3, Workers: 3}}} {
					var got bytes.Buffer
					if err := write(&got, tc.tt, tc.e); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got.Bytes(), want.Bytes()) {
						t.Fatalf("interleaved=%v iter %d (range %v) v2=%v %s: output differs\n got %s\nwant %s",
							interleaved, iter, rng, v2, tc.name, clipBody(got.Bytes()), clipBody(want.Bytes()))
					}
				}
			}
		}
	}
}

func TestEncodeTermsNeedsWholePlan(t *testing.T) {
	rec, ls := bigAnswer(t, 3, 64, 3*4, true)
	ans, err := Plan(rec, &httprange.Range{Start: 0, End: rec.Size - 1}, ls.get)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := EncodeTerms(ans); !errors.Is(err, ErrNotWhole) {
		t.Fatalf("EncodeTerms of a ranged plan: %v, want ErrNotWhole", err)
	}
	empty, err := Plan(&FileRecord{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tt, err := EncodeTerms(empty)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := WriteV2(&want, empty, testSigner{}); err != nil {
		t.Fatal(err)
	}
	if got := append(bytes.Clone(tt.Prefix()), Encoder{}.AppendRestV2(nil, empty, testSigner{})...); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("empty file: %s, want %s", got, want.Bytes())
	}
}
