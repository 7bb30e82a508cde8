package handlers

import (
	"context"
	"net/http"
	"time"
)

// Check is one dependency /readyz asks about.
type Check struct {
	// Name labels the check in the response, e.g. "database".
	Name string
	// Func returns nil when the dependency answers.
	Func func(ctx context.Context) error
	// Required checks decide readiness. A check that is not required is
	// reported only: the API keeps taking holds while NATS is down (the
	// outbox absorbs the outage), so NATS must not take it out of a load
	// balancer.
	Required bool
}

// HealthOutput is the answer of /healthz and /readyz.
type HealthOutput struct {
	Status int
	Body   struct {
		Status string            `json:"status" enum:"ok,unavailable" doc:"ok when the process (liveness) or its required dependencies (readiness) answer."`
		Checks map[string]string `json:"checks,omitempty" doc:"Each dependency: ok or unavailable."`
		// Payments is reported by /readyz only.
		Payments string `json:"payments,omitempty" enum:"stripe,sandbox" doc:"The payment provider: stripe, or sandbox, a stand-in for development and tests whose routes let buyers authorize their own payments (BOXOFFICE_PAYMENTS=sandbox; never in production). Readiness does not depend on it."`
	}
}

func (h *Handlers) ready(ctx context.Context, _ *struct{}) (*HealthOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	out := &HealthOutput{Status: http.StatusOK}
	out.Body.Status = "ok"
	out.Body.Payments = h.cfg.Payments
	out.Body.Checks = map[string]string{}
	for _, c := range h.cfg.Checks {
		if err := c.Func(ctx); err != nil {
			h.logger.WarnContext(ctx, "dependency not answering", "check", c.Name, "error", err.Error())
			out.Body.Checks[c.Name] = "unavailable"
			if c.Required {
				out.Status, out.Body.Status = http.StatusServiceUnavailable, "unavailable"
			}
			continue
		}
		out.Body.Checks[c.Name] = "ok"
	}
	return out, nil
}
