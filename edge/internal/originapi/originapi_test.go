package originapi

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

func layoutOf(data string) *xorb.Layout {
	b := xorb.NewBuilder(xorb.None)
	b.Add([]byte(data), hash.Chunk([]byte(data)))
	_, l := b.Finish()
	return l
}

// encodeLayouts writes the /internal/v1/layouts answer format.
func encodeLayouts(ls ...*xorb.Layout) []byte {
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(ls)))
	for _, l := range ls {
		b, _ := l.MarshalBinary()
		out = append(out, l.Hash[:]...)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(b)))
		out = append(out, b...)
	}
	return out
}

func TestParseLayouts(t *testing.T) {
	a, b := layoutOf("a"), layoutOf("b")
	want := map[hash.Hash]bool{a.Hash: true, b.Hash: true}
	good := encodeLayouts(a, b)
	got, err := parseLayouts(good, want)
	if err != nil || len(got) != 2 || got[a.Hash].Hash != a.Hash {
		t.Fatalf("good answer: %v %v", got, err)
	}
	misnamed := encodeLayouts(a)
	copy(misnamed[4:], b.Hash[:])
	for name, in := range map[string][]byte{
		"empty":     nil,
		"truncated": good[:len(good)-1],
		"trailing":  append(append([]byte(nil), good...), 0),
		"too many":  encodeLayouts(a, b, layoutOf("c")),
		"unasked":   encodeLayouts(layoutOf("c")),
		"misnamed":  misnamed,
		"huge len":  binary.LittleEndian.AppendUint32(append(binary.LittleEndian.AppendUint32(nil, 1), a.Hash[:]...), 1<<31),
	} {
		if _, err := parseLayouts(in, want); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzParseLayouts(f *testing.F) {
	a, b := layoutOf("a"), layoutOf("bb")
	f.Add(encodeLayouts(a, b))
	f.Add(encodeLayouts(a))
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := parseLayouts(in, map[hash.Hash]bool{a.Hash: true, b.Hash: true})
		if err != nil {
			return
		}
		for h, l := range got {
			if l.Hash != h || l.Verify() != nil {
				t.Fatalf("accepted a layout that does not verify for %s", h)
			}
		}
	})
}

func TestErrorsAreClassified(t *testing.T) {
	// A refused connection is ErrUnavailable; a hung origin ErrTimeout; a 404 ErrNotFound;
	// a 500 ErrUnavailable.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + ln.Addr().String()
	ln.Close()
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			<-hang
		case "/internal/v1/jwks":
			w.WriteHeader(500)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	defer close(hang)
	for _, c := range []struct {
		name string
		base string
		call func(*Client) error
		want error
	}{
		{"refused", closedURL, func(c *Client) error { return c.Ping(context.Background()) }, ErrUnavailable},
		{"hung", srv.URL, func(c *Client) error { return c.Ping(context.Background()) }, ErrTimeout},
		{"404", srv.URL, func(c *Client) error { _, err := c.File(context.Background(), hash.Zero, "s"); return err }, ErrNotFound},
		{"500", srv.URL, func(c *Client) error { _, err := c.JWKS(context.Background()); return err }, ErrUnavailable},
	} {
		cl, err := New(Options{BaseURL: c.base, Token: "t", Timeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.call(cl); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}
