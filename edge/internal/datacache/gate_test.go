package datacache

import (
	"context"
	"errors"
	"testing"
	"time"
)

// queued waits until n waiters stand at g.
func queued(t *testing.T, g *gate, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		k := len(g.waiters)
		g.mu.Unlock()
		if k == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters at the gate, want %d", k, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGateOrder: when the gate is released, the fill a reader waits for goes first, then a fill
// a read joined, then the oldest read-ahead fill; a new fill does not pass the queue.
func TestGateOrder(t *testing.T) {
	g := newGate(1)
	if err := g.acquire(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	old := &flight{seq: 1}
	young := &flight{seq: 2}
	joined := &flight{seq: 4}
	joined.demanded.Store(true)
	waited := &flight{seq: 5}
	waited.waiting.Add(1)
	got := make(chan *flight, 4)
	for i, fl := range []*flight{young, waited, old, joined} {
		go func() {
			if err := g.acquire(context.Background(), fl); err != nil {
				t.Error(err)
			}
			got <- fl
		}()
		queued(t, g, i+1)
	}
	for _, want := range []*flight{waited, joined, old, young} {
		g.release()
		if fl := <-got; fl != want {
			t.Fatalf("gate went to the fill of seq %d, want seq %d", fl.seq, want.seq)
		}
	}
	g.release()
	if g.free != 1 || len(g.waiters) != 0 {
		t.Fatalf("gate free %d with %d waiters after the last release, want 1 and 0", g.free, len(g.waiters))
	}
}

// TestGateCancel: a waiter whose context ends leaves the queue with the context's error, and the
// gate is not lost, also when it was handed to the waiter just as its context ended.
func TestGateCancel(t *testing.T) {
	g := newGate(1)
	if err := g.acquire(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	gone := errors.New("fill ended")
	done := make(chan error, 1)
	go func() { done <- g.acquire(ctx, &flight{seq: 1}) }()
	queued(t, g, 1)
	cancel(gone)
	if err := <-done; !errors.Is(err, gone) {
		t.Fatalf("acquire = %v, want the context's cause", err)
	}
	queued(t, g, 0)
	g.release()
	if g.free != 1 {
		t.Fatalf("free %d after release, want 1", g.free)
	}

	// Handed over as its context ends: whichever the waiter sees, the gate is not lost (a
	// waiter that returns an error after being handed the gate passes it on).
	for i := range 50 {
		if err := g.acquire(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			if g.acquire(ctx, &flight{seq: uint64(i)}) == nil {
				g.release()
			}
			done <- nil
		}()
		queued(t, g, 1)
		g.release()
		cancel()
		<-done
		if g.free != 1 || len(g.waiters) != 0 {
			t.Fatalf("round %d: free %d, %d waiters; want 1 and 0", i, g.free, len(g.waiters))
		}
	}
}

// TestGateSize: the data cache verifies on one P fewer than the runtime has (at least one).
func TestGateSize(t *testing.T) {
	if g := newGate(0); g.free != 1 {
		t.Fatalf("newGate(0) free %d, want 1", g.free)
	}
	if g := newGate(3); g.free != 3 {
		t.Fatalf("newGate(3) free %d, want 3", g.free)
	}
}
