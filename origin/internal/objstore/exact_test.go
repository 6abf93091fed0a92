package objstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

func TestExactReader(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 1000)
	tests := []struct {
		name    string
		r       io.Reader
		size    int64
		wantErr error
	}{
		{"exact", bytes.NewReader(data), int64(len(data)), nil},
		{"exact one byte at a time", iotest.OneByteReader(bytes.NewReader(data)), int64(len(data)), nil},
		{"exact with data+EOF", iotest.DataErrReader(bytes.NewReader(data)), int64(len(data)), nil},
		{"empty", bytes.NewReader(nil), 0, nil},
		{"short", bytes.NewReader(data[:10]), 11, ErrSize},
		{"empty but declared", bytes.NewReader(nil), 1, ErrSize},
		{"long", bytes.NewReader(data), int64(len(data)) - 1, ErrSize},
		{"long with zero declared", bytes.NewReader(data[:1]), 0, ErrSize},
		{"reader error", iotest.ErrReader(iotest.ErrTimeout), 5, iotest.ErrTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newExactReader(context.Background(), tc.r, tc.size)
			got, rerr := io.ReadAll(e)
			err := e.done()
			if !errors.Is(rerr, tc.wantErr) && !(tc.wantErr == nil && rerr == nil) {
				t.Errorf("ReadAll: err = %v, want %v", rerr, tc.wantErr)
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("done = %v", err)
				}
				if int64(len(got)) != tc.size {
					t.Fatalf("read %d bytes, want %d", len(got), tc.size)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("done = %v, want %v", err, tc.wantErr)
			}
			if int64(len(got)) >= tc.size && tc.size > 0 {
				t.Fatalf("handed out all %d declared bytes of a bad body", len(got))
			}
		})
	}
}

// A consumer that reads exactly size bytes and stops (as an HTTP client sending a body with a
// Content-Length does) must still learn of a body that is too long, before it commits.
func TestExactReaderStopsBeforeLastByte(t *testing.T) {
	e := newExactReader(context.Background(), bytes.NewReader([]byte("abcdef")), 5)
	buf := make([]byte, 5)
	n, err := io.ReadFull(e, buf)
	if !errors.Is(err, ErrSize) || n == 5 {
		t.Fatalf("ReadFull = %d, %v; want fewer than 5 bytes and ErrSize", n, err)
	}
	// Zero declared bytes: the consumer may never call Read; done must find the extra byte.
	e = newExactReader(context.Background(), bytes.NewReader([]byte("x")), 0)
	if err := e.done(); !errors.Is(err, ErrSize) {
		t.Fatalf("done on size 0 with a byte left = %v, want ErrSize", err)
	}
}

func TestExactReaderContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	e := newExactReader(ctx, bytes.NewReader(make([]byte, 100)), 100)
	if _, err := e.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := e.Read(make([]byte, 10)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Read after cancel: %v", err)
	}
	if err := e.done(); !errors.Is(err, context.Canceled) {
		t.Fatalf("done after cancel: %v", err)
	}
}
