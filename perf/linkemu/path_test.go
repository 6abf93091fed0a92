package linkemu

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func TestPathDelayAndJitter(t *testing.T) {
	p := NewPath(Link{Delay: 50 * time.Millisecond, Jitter: 5 * time.Millisecond}, 7)
	var prev time.Time
	lo, hi := time.Hour, time.Duration(0)
	for i := range 10000 {
		now := t0.Add(time.Duration(i) * time.Millisecond) // 1 ms apart: jitter could reorder them
		at, v := p.Schedule(now, 1500)
		if v != Forward {
			t.Fatalf("packet %d: verdict %v on a lossless path", i, v)
		}
		if at.Before(prev) {
			t.Fatalf("packet %d arrives at %v, before the one sent ahead of it (%v)", i, at, prev)
		}
		prev = at
		d := at.Sub(now)
		lo, hi = min(lo, d), max(hi, d)
		if d < 45*time.Millisecond || d > 56*time.Millisecond {
			t.Fatalf("packet %d: one-way delay %v, want 50ms ± 5ms (+1ms of order hold at most)", i, d)
		}
	}
	// The jitter is really drawn: the range is nearly its full width.
	if lo > 46*time.Millisecond || hi < 54*time.Millisecond {
		t.Fatalf("delays %v-%v: the jitter of ±5ms is not used", lo, hi)
	}
	if p.Stats.Packets != 10000 || p.Stats.Bytes != 15_000_000 {
		t.Fatalf("stats %+v", p.Stats)
	}
}

func TestPathNoJitterExactDelay(t *testing.T) {
	p := NewPath(Link{Delay: time.Millisecond}, 1)
	at, v := p.Schedule(t0, 100)
	if v != Forward || at.Sub(t0) != time.Millisecond {
		t.Fatalf("got %v %v, want forward after exactly 1ms", at.Sub(t0), v)
	}
}

func TestPathLossRate(t *testing.T) {
	for _, loss := range []float64{0, 0.005, 0.1} {
		p := NewPath(Link{Delay: time.Millisecond, Loss: loss}, 3)
		const n = 200000
		lost := 0
		for i := range n {
			if _, v := p.Schedule(t0.Add(time.Duration(i)*time.Microsecond), 1000); v == DropLoss {
				lost++
			}
		}
		// Binomial: 5 standard deviations (plus one packet) around n·loss.
		sd := math.Sqrt(n * loss * (1 - loss))
		if math.Abs(float64(lost)-n*loss) > 5*sd+1 {
			t.Fatalf("loss %v: %d of %d lost, want %.0f ± %.0f", loss, lost, n, n*loss, 5*sd)
		}
		if p.Stats.Lost != uint64(lost) || p.Stats.Packets != uint64(n-lost) {
			t.Fatalf("loss %v: stats %+v, counted %d lost", loss, p.Stats, lost)
		}
	}
}

func TestPathSeedReproducible(t *testing.T) {
	l := Link{Delay: 10 * time.Millisecond, Jitter: 2 * time.Millisecond, Loss: 0.2}
	a, b, c := NewPath(l, 42), NewPath(l, 42), NewPath(l, 43)
	differ := false
	for i := range 1000 {
		now := t0.Add(time.Duration(i) * 5 * time.Millisecond)
		x, vx := a.Schedule(now, 1)
		y, vy := b.Schedule(now, 1)
		z, vz := c.Schedule(now, 1)
		if x != y || vx != vy {
			t.Fatalf("packet %d: same seed, different fate: %v/%v vs %v/%v", i, x, vx, y, vy)
		}
		differ = differ || x != z || vx != vz
	}
	if !differ {
		t.Fatal("seeds 42 and 43 drew the same 1000 fates")
	}
}

func TestPathRate(t *testing.T) {
	// 12 Mbit/s: a 1500-byte packet takes 1 ms on the wire.
	p := NewPath(Link{Delay: 20 * time.Millisecond, RateBps: 12e6, Queue: time.Second}, 1)
	var last time.Time
	for i := range 500 { // a burst, all offered at t0
		at, v := p.Schedule(t0, 1500)
		if v != Forward {
			t.Fatalf("packet %d: %v with a 1s queue", i, v)
		}
		if want := t0.Add(20*time.Millisecond + time.Duration(i+1)*time.Millisecond); !at.Equal(want) {
			t.Fatalf("packet %d arrives at +%v, want +%v", i, at.Sub(t0), want.Sub(t0))
		}
		last = at
	}
	// Offered at the rate, packets do not queue: each one takes its 1 ms and the delay.
	now := last
	for i := range 100 {
		now = now.Add(time.Millisecond)
		at, _ := p.Schedule(now, 1500)
		if d := at.Sub(now); d != 21*time.Millisecond {
			t.Fatalf("paced packet %d: %v after it was offered, want 21ms", i, d)
		}
	}
}

func TestPathQueueLimit(t *testing.T) {
	// 1 ms per packet, 10 ms of queue: of a burst of 100 at once, the first 11 fit (the 11th
	// starts after exactly 10 ms of waiting), the rest are dropped.
	p := NewPath(Link{RateBps: 12e6, Queue: 10 * time.Millisecond}, 1)
	fwd := 0
	for range 100 {
		if _, v := p.Schedule(t0, 1500); v == Forward {
			fwd++
		} else if v != DropQueue {
			t.Fatalf("verdict %v on a lossless path", v)
		}
	}
	if fwd != 11 || p.Stats.QueueDrops != 89 {
		t.Fatalf("%d forwarded, stats %+v; want 11 forwarded, 89 queue drops", fwd, p.Stats)
	}
	// Once the queue drained, packets pass again.
	if _, v := p.Schedule(t0.Add(time.Second), 1500); v != Forward {
		t.Fatalf("after the queue drained: %v", v)
	}
}

func TestPathUnlimitedRate(t *testing.T) {
	p := NewPath(Link{Delay: 5 * time.Millisecond}, 1)
	for i := range 10000 {
		at, v := p.Schedule(t0, 65535)
		if v != Forward || at.Sub(t0) != 5*time.Millisecond {
			t.Fatalf("packet %d: %v at +%v; an unlimited path neither queues nor drops", i, v, at.Sub(t0))
		}
	}
}
