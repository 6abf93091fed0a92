package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestCounterAndHistogram(t *testing.T) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "c"})
	c.Add(2.5)
	if got := Counter(t, c); got != 2.5 {
		t.Errorf("Counter: %v; want 2.5", got)
	}
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h"})
	h.Observe(1)
	h.Observe(7)
	if got := HistogramCount(t, h); got != 2 {
		t.Errorf("HistogramCount: %d; want 2", got)
	}
}
