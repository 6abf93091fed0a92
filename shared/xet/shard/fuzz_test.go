package shard

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"
)

// FuzzParse checks that Parse never panics, that every failure is a typed error, and that
// whatever it accepts writes back to bytes that parse to the same value.
func FuzzParse(f *testing.F) {
	f.Add(loadHex(f, "hello_upload.hex"))
	f.Add(loadHex(f, "hello_hfjs_footer.hex"))
	f.Add(sampleShard(true).AppendUpload(nil))
	f.Add(sampleShard(false).AppendWithFooter(nil))
	f.Add(DedupAnswer(sampleShard(true).Xorbs, testHash(7), time.Unix(1, 0), time.Unix(2, 0)).AppendWithFooter(nil))
	f.Add((&Shard{}).AppendUpload(nil))

	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := Parse(body)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || !(errors.Is(err, ErrCorrupt) || errors.Is(err, ErrTooLarge)) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			if fe.Offset < 0 || fe.Offset > max(len(body), MaxSize) {
				t.Fatalf("offset %d outside body of %d bytes", fe.Offset, len(body))
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("parsed shard fails Validate: %v", err)
		}
		var out []byte
		if s.Footer != nil {
			out = s.AppendWithFooter(nil)
		} else {
			out = s.AppendUpload(nil)
		}
		if len(out) != s.EncodedLen(s.Footer != nil) {
			t.Fatalf("wrote %d bytes, EncodedLen %d", len(out), s.EncodedLen(s.Footer != nil))
		}
		if !bytes.Equal(out[:HeaderSize], body[:HeaderSize]) {
			t.Fatalf("header changed: %x -> %x", body[:HeaderSize], out[:HeaderSize])
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if s.Footer != nil {
			// The writer recomputes the byte sums.
			again.Footer.StoredBytesOnDisk = s.Footer.StoredBytesOnDisk
			again.Footer.MaterializedBytes = s.Footer.MaterializedBytes
			again.Footer.StoredBytes = s.Footer.StoredBytes
		}
		if !reflect.DeepEqual(s, again) {
			t.Fatalf("round trip changed the shard\n was %+v\n now %+v", s, again)
		}
	})
}
