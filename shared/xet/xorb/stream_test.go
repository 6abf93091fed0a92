package xorb

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// pieceReader returns r's bytes in reads of at most sizes[i % len(sizes)] bytes, as a socket
// delivers a body.
type pieceReader struct {
	b     []byte
	sizes []int
	i     int
}

func (p *pieceReader) Read(q []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(q), len(p.b), max(p.sizes[p.i%len(p.sizes)], 1))
	p.i++
	copy(q, p.b[:n])
	p.b = p.b[n:]
	return n, nil
}

// streamOf runs ValidateStream over body read in pieces of the given sizes, and returns what
// it wrote too.
func streamOf(body []byte, expect *hash.Hash, sizes ...int) (*Layout, int64, []byte, error) {
	var w bytes.Buffer
	l, area, err := ValidateStream(&pieceReader{b: body, sizes: sizes}, &w, expect)
	return l, area, w.Bytes(), err
}

// TestValidateStreamMatchesValidate checks that the streaming validator accepts every
// encoding a client may choose (uncompressed, LZ4, byte-grouping LZ4, mixed), with and without
// an upload footer, whatever the read sizes, with Validate's layout, and writes exactly the
// chunk area; and so does the in-place one, leaving the chunk area at the buffer's start.
func TestValidateStreamMatchesValidate(t *testing.T) {
	for _, s := range []Scheme{None, LZ4, BG4, Auto} {
		chunks := mixedChunks()
		// More than a stream buffer of chunks, so the window moves.
		for i := range 12 {
			chunks = append(chunks, textLike(MaxChunkRaw, uint64(20+i)))
		}
		body, want := buildBody(t, s, chunks...)
		for _, tc := range []struct {
			name string
			body []byte
		}{{"plain", body}, {"footer", AppendFooter(bytes.Clone(body), want, 7)}, {"footer-v0", appendFooterV0(bytes.Clone(body), want)}} {
			for _, sizes := range [][]int{{1 << 30}, {1, 7, 8, 9}, {65536, 3}, {HeaderSize + MaxChunkBytes}} {
				got, area, wrote, err := streamOf(tc.body, &want.Hash, sizes...)
				if err != nil {
					t.Fatalf("%s %s reads %v: %v", s, tc.name, sizes, err)
				}
				if area != int64(len(body)) || !bytes.Equal(wrote, body) {
					t.Fatalf("%s %s reads %v: area %d, wrote %d bytes, want %d", s, tc.name, sizes, area, len(wrote), len(body))
				}
				assertLayoutEqual(t, got, want)
				got, area, held, err := inPlaceOf(tc.body, len(tc.body)+1, &want.Hash, sizes...)
				if err != nil {
					t.Fatalf("%s %s reads %v in place: %v", s, tc.name, sizes, err)
				}
				if area != int64(len(body)) || !bytes.Equal(held[:area], body) {
					t.Fatalf("%s %s reads %v in place: area %d, want %d", s, tc.name, sizes, area, len(body))
				}
				assertLayoutEqual(t, got, want)
			}
			// A buffer the chunk area fills is too small: the body could go on.
			if _, _, _, err := inPlaceOf(tc.body, len(body), &want.Hash, 1<<30); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("%s %s in a buffer of its chunk area's length: %v; want ErrTooLarge", s, tc.name, err)
			}
		}
	}
}

// inPlaceOf runs ValidateStreamInPlace over body read in pieces of the given sizes into a
// buffer of n bytes, and returns the buffer.
func inPlaceOf(body []byte, n int, expect *hash.Hash, sizes ...int) (*Layout, int64, []byte, error) {
	buf := make([]byte, n)
	l, area, err := ValidateStreamInPlace(&pieceReader{b: body, sizes: sizes}, buf, expect)
	return l, area, buf, err
}

// TestValidateStreamRejects checks the streaming validators' refusals: each of these bodies
// fails, with Validate's sentinel, streamed and in place.
func TestValidateStreamRejects(t *testing.T) {
	body, l := buildBody(t, LZ4, textLike(70_000, 1), floatLike(65_536, 2), randomBytes(9_000, 3))
	other := hash.Chunk([]byte("other"))
	flipped := bytes.Clone(body)
	flipped[HeaderSize+100] ^= 1
	footer := AppendFooter(bytes.Clone(body), l, 0)
	badFooter := bytes.Clone(footer)
	badFooter[len(body)+20] ^= 1
	for _, tc := range []struct {
		name   string
		body   []byte
		expect *hash.Hash
		want   error
	}{
		{"empty", nil, nil, ErrEmpty},
		{"footer only", AppendFooter(nil, &Layout{}, 0), nil, ErrEmpty},
		{"truncated payload", body[:len(body)-1], nil, ErrCorrupt},
		{"truncated header", body[:l.StoredEnds[0]+3], nil, ErrCorrupt},
		{"flipped payload byte", flipped, &l.Hash, nil},
		{"wrong hash", body, &other, ErrHashMismatch},
		{"trailing bytes", append(bytes.Clone(body), 1, 2, 3), nil, ErrCorrupt},
		{"footer disagrees", badFooter, nil, ErrCorrupt},
		{"bytes after the footer", append(bytes.Clone(footer), 0), nil, ErrCorrupt},
	} {
		_, _, err1 := Validate(tc.body, ValidateOptions{Expect: tc.expect})
		_, _, _, err2 := streamOf(tc.body, tc.expect, 4096, 13)
		_, _, _, err3 := inPlaceOf(tc.body, len(tc.body)+1, tc.expect, 4096, 13)
		if err1 == nil || err2 == nil || err3 == nil {
			t.Errorf("%s: Validate %v, ValidateStream %v, in place %v; want all to fail", tc.name, err1, err2, err3)
			continue
		}
		if tc.want != nil && (!errors.Is(err1, tc.want) || !errors.Is(err2, tc.want) || !errors.Is(err3, tc.want)) {
			t.Errorf("%s: Validate %v, ValidateStream %v, in place %v; want %v", tc.name, err1, err2, err3, tc.want)
		}
	}
}

// TestValidateStreamReaderErrors checks that a failing reader is a *ReadError (the caller's
// to classify: cut off, too slow, too large), a reader that makes no progress ends, and a
// failing writer is a *WriteError.
func TestValidateStreamReaderErrors(t *testing.T) {
	body, _ := buildBody(t, None, textLike(70_000, 1), textLike(70_000, 2))
	boom := errors.New("boom")
	_, _, err := ValidateStream(io.MultiReader(bytes.NewReader(body[:1000]), errReader{boom}), io.Discard, nil)
	var re *ReadError
	if !errors.As(err, &re) || !errors.Is(err, boom) {
		t.Errorf("failing reader: %v; want a *ReadError wrapping it", err)
	}
	_, _, err = ValidateStream(errReader{nil}, io.Discard, nil)
	if !errors.As(err, &re) || !errors.Is(err, io.ErrNoProgress) {
		t.Errorf("reader without progress: %v; want a *ReadError wrapping io.ErrNoProgress", err)
	}
	_, _, err = ValidateStream(bytes.NewReader(body), errWriter{boom}, nil)
	var we *WriteError
	if !errors.As(err, &we) || !errors.Is(err, boom) {
		t.Errorf("failing writer: %v; want a *WriteError wrapping it", err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

type errWriter struct{ err error }

func (e errWriter) Write([]byte) (int, error) { return 0, e.err }
