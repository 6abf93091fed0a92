package server

import (
	"bytes"
	"testing"

	"github.com/xetcdn/xetcdn/shared/auth"
)

func TestPermitsTakeHalf(t *testing.T) {
	p := newPermits(8)
	steps := []struct{ max, want, free int }{
		{7, 4, 4}, // half of 8
		{7, 2, 2}, // half of what is left
		{1, 1, 1},
		{7, 0, 1}, // half of 1 is nothing
	}
	for i, s := range steps {
		if got := p.takeHalf(s.max); got != s.want || p.free != s.free {
			t.Fatalf("step %d: took %d (free %d), want %d (free %d)", i, got, p.free, s.want, s.free)
		}
	}
	p.release(7)
	if p.free != 8 {
		t.Fatalf("free %d after release", p.free)
	}
}

func TestParallelAnswerIsIdentical(t *testing.T) {
	e := newEnv(t, sqliteLocal())
	f := makeFixture(t, 40, 6, 5, 300)
	e.upload(f, "s")
	r := e.token("s", auth.Read)
	path := "/v2/reconstructions/" + f.file.String()
	serial := expect(t, e.do("GET", path, r, nil), 200)
	serialV1 := expect(t, e.do("GET", "/v1/reconstructions/"+f.file.String(), r, nil), 200)
	e.cfg.Limits.ReconParallelAt = 1 // every answer now takes extra writers
	parallel := expect(t, e.do("GET", path, r, nil), 200)
	parallelV1 := expect(t, e.do("GET", "/v1/reconstructions/"+f.file.String(), r, nil), 200)
	if !bytes.Equal(serial, parallel) || !bytes.Equal(serialV1, parallelV1) {
		t.Fatalf("parallel answer differs:\n%s\n%s", serial, parallel)
	}
	if n := gathered(t, e, "xet_origin_recon_parallel_writes_total"); n != 2 {
		t.Fatalf("%v answers written in parallel, want 2", n)
	}
	if e.srv.permits.free != e.cfg.Limits.ReconPermits {
		t.Fatalf("permits leaked: %d free of %d", e.srv.permits.free, e.cfg.Limits.ReconPermits)
	}
}

// gathered sums the values of the counter name over its label sets.
func gathered(t *testing.T, e *env, name string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
