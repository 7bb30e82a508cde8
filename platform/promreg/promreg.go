// Package promreg registers Prometheus collectors so that several
// components of one kind (two relays, many consumers) can share a registry.
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns it, or returns the equal
// collector already registered there, so components registering the same
// metrics share them. A nil reg registers nothing and returns c. Any other
// registration error is a programming error (a clashing metric of the same
// name) and panics.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(fmt.Sprintf("register metrics: %v", err))
}
