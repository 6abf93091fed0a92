package linkemu

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"
)

// chanPort is a node's side in memory: packets the test sends come out of Read, packets the
// router delivers go to got.
type chanPort struct {
	out  chan []byte
	got  chan []byte
	once sync.Once
	done chan struct{}
}

func newChanPort() *chanPort {
	return &chanPort{out: make(chan []byte, 1024), got: make(chan []byte, 1024), done: make(chan struct{})}
}

func (p *chanPort) Read(b []byte) (int, error) {
	select {
	case pkt := <-p.out:
		return copy(b, pkt), nil
	case <-p.done:
		return 0, io.EOF
	}
}

func (p *chanPort) Write(b []byte) (int, error) {
	p.got <- append([]byte(nil), b...)
	return len(b), nil
}

func (p *chanPort) Close() error { p.once.Do(func() { close(p.done) }); return nil }

func ipv4(src, dst [4]byte, seq byte) []byte {
	b := make([]byte, 28)
	b[0] = 0x45
	b[3] = 28
	copy(b[12:16], src[:])
	copy(b[16:20], dst[:])
	b[27] = seq
	return b
}

func TestRouterForwardsWithDelay(t *testing.T) {
	c, err := ParseConfig([]byte(`{"nodes": [
	  {"name": "a", "netns": "n1", "addr": "10.9.0.1", "region": "x"},
	  {"name": "b", "netns": "n2", "addr": "10.9.0.2", "region": "y"},
	  {"name": "c", "netns": "n3", "addr": "10.9.0.3", "region": "y"}],
	 "paths": [{"regions": ["x", "y"], "rtt": "80ms"}, {"regions": ["y", "y"], "rtt": "2ms", "loss": 0.5}]}`))
	if err != nil {
		t.Fatal(err)
	}
	pa, pb, pc := newChanPort(), newChanPort(), newChanPort()
	r, err := NewRouter(c, []Port{pa, pb, pc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	a, b, cc := [4]byte{10, 9, 0, 1}, [4]byte{10, 9, 0, 2}, [4]byte{10, 9, 0, 3}
	start := time.Now()
	for i := range 10 {
		pa.out <- ipv4(a, b, byte(i))
	}
	pa.out <- ipv4(a, [4]byte{10, 9, 0, 99}, 0) // nobody's address
	pa.out <- []byte{0x00, 1, 2}                // not IP
	for i := range 10 {
		select {
		case got := <-pb.got:
			if el := time.Since(start); el < 40*time.Millisecond {
				t.Fatalf("packet %d after %v, want ≥ 40ms (half the 80ms RTT)", i, el)
			}
			if got[27] != byte(i) || [4]byte(got[16:20]) != b {
				t.Fatalf("packet %d: got seq %d to %v", i, got[27], got[16:20])
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("packet %d not delivered", i)
		}
	}
	// Half of b's packets to c are lost.
	for i := range 200 {
		pb.out <- ipv4(b, cc, byte(i))
	}
	got := 0
	for wait := time.After(2 * time.Second); ; {
		select {
		case <-pc.got:
			got++
			continue
		case <-wait:
		}
		break
	}
	if got < 50 || got > 150 {
		t.Fatalf("%d of 200 packets over a path with 50%% loss", got)
	}
	if len(pa.got) != 0 {
		t.Fatalf("a received %d packets it was not sent", len(pa.got))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s := r.Stats()
	if s.Unknown != 1 || s.NotIP != 1 {
		t.Fatalf("unknown %d, not IP %d; want 1 and 1", s.Unknown, s.NotIP)
	}
	if ab := s.Paths["a>b"]; ab.Packets != 10 || ab.Bytes != 280 {
		t.Fatalf("a>b stats %+v", ab)
	}
	if bc := s.Paths["b>c"]; bc.Packets != uint64(got) || bc.Lost != uint64(200-got) {
		t.Fatalf("b>c stats %+v, %d delivered", bc, got)
	}
}
