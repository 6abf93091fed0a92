package config

import (
	"strings"
	"testing"
	"time"
)

// TestGCConfig: gc.grace defaults to auth.dedup_expiry + 1 day (following a changed expiry),
// a grace below the expiry is refused unless gc.force, below 1 s always, and a negative
// interval is refused.
func TestGCConfig(t *testing.T) {
	c := Default()
	c.DataDir = t.TempDir()
	c.fillDerived()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if g := c.EffectiveGrace(); g != 8*24*time.Hour {
		t.Errorf("default grace %v", g)
	}
	c.Auth.DedupExpiry = Duration(30 * 24 * time.Hour)
	if g := c.EffectiveGrace(); g != 31*24*time.Hour || c.Validate() != nil {
		t.Errorf("grace %v with a 30-day expiry, validate %v", g, c.Validate())
	}
	for _, tc := range []struct {
		gc   GC
		want string // "" = accepted
	}{
		{GC{Grace: Duration(time.Hour)}, "shorter than auth.dedup_expiry"},
		{GC{Grace: Duration(time.Hour), Force: true}, ""},
		{GC{Grace: Duration(time.Millisecond), Force: true}, "below 1s"},
		{GC{Interval: Duration(-time.Second)}, "gc.interval must not be negative"},
		{GC{Interval: Duration(time.Hour)}, ""},
	} {
		c.GC = tc.gc
		err := c.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v; want %q", tc.gc, err, tc.want)
		}
	}
}
