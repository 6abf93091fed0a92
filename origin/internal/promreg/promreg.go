// Package promreg registers Prometheus collectors that several decorators of one process may
// each create: the second registration of an equal collector returns the first one, so the
// decorators share it instead of failing.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg, or returns the collector of the same type registered before
// under the same description. Any other registration error is returned.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if prev, ok := are.ExistingCollector.(C); ok {
			return prev, nil
		}
	}
	return c, err
}
