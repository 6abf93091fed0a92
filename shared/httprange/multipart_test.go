package httprange

import (
	"bytes"
	"io"
	"mime/multipart"
	"testing"
)

func TestContentRange(t *testing.T) {
	if got := ContentRange(ByteRange{Start: 0, End: 9}, 100); got != "bytes 0-9/100" {
		t.Fatalf("ContentRange = %q", got)
	}
	if got := ContentRange(ByteRange{Start: 1 << 40, End: 1<<40 + 1}, 1<<41); got != "bytes 1099511627776-1099511627777/2199023255552" {
		t.Fatalf("ContentRange = %q", got)
	}
}

// A body framed with PartHeader and MultipartClosing reads back, part by part, with the standard
// library's multipart reader (the framing the Xet clients' parsers follow).
func TestMultipartFraming(t *testing.T) {
	obj := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	parts := []ByteRange{{Start: 0, End: 3}, {Start: 10, End: 10}, {Start: 20, End: 35}}
	boundary := NewBoundary()
	if len(boundary) != 24 || boundary == NewBoundary() {
		t.Fatalf("boundary %q is not 24 random hex digits", boundary)
	}
	var body bytes.Buffer
	for i, p := range parts {
		body.WriteString(PartHeader(boundary, p, uint64(len(obj)), i == 0))
		body.Write(obj[p.Start : p.End+1])
	}
	body.WriteString(MultipartClosing(boundary))

	r := multipart.NewReader(&body, boundary)
	for i, p := range parts {
		part, err := r.NextPart()
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if got, want := part.Header.Get("Content-Range"), ContentRange(p, uint64(len(obj))); got != want {
			t.Errorf("part %d Content-Range %q, want %q", i, got, want)
		}
		data, err := io.ReadAll(part)
		if err != nil || !bytes.Equal(data, obj[p.Start:p.End+1]) {
			t.Errorf("part %d = %q, %v; want %q", i, data, err, obj[p.Start:p.End+1])
		}
	}
	if _, err := r.NextPart(); err != io.EOF {
		t.Fatalf("after the last part: %v, want io.EOF", err)
	}
}
