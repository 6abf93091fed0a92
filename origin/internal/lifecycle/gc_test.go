package lifecycle

import (
	"errors"
	"testing"
	"time"
)

// TestCheckGrace: the grace period's range, with and without force.
func TestCheckGrace(t *testing.T) {
	const week = 7 * 24 * time.Hour
	for _, c := range []struct {
		grace time.Duration
		force bool
		ok    bool
	}{
		{week + time.Hour, false, true},
		{week, false, true},
		{week - time.Second, false, false},
		{time.Second, true, true},
		{time.Second - 1, true, false},
		{0, true, false},
		{-time.Hour, true, false},
	} {
		err := CheckGrace(c.grace, week, c.force)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrGrace)) {
			t.Errorf("CheckGrace(%v, force %v) = %v; want ok %v", c.grace, c.force, err, c.ok)
		}
	}
}
