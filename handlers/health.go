package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
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

func (h *Handlers) registerHealth(api huma.API) {
	register(api, huma.Operation{
		OperationID: "get-healthz", Method: http.MethodGet, Path: "/healthz",
		Summary: "Liveness: the process is up", Tags: []string{"Operations"},
		Description: "Public. 200 while the process serves HTTP, whatever its dependencies: restart it only when this stops answering.",
	}, func(ctx context.Context, _ *struct{}) (*HealthOutput, error) {
		out := &HealthOutput{Status: http.StatusOK}
		out.Body.Status = "ok"
		return out, nil
	})
	register(api, huma.Operation{
		OperationID: "get-readyz", Method: http.MethodGet, Path: "/readyz",
		Summary: "Readiness: the database answers (NATS is reported, not required)",
		Description: "Public. 200 when the purchase cells' databases answer within 2 seconds, with each dependency's state in checks; " +
			"503 when one does not, so a load balancer sends buyers elsewhere. NATS is reported but not required: holds are written to the outbox either way.",
		Tags: []string{"Operations"},
		Responses: map[string]*huma.Response{
			"503": {Description: "A required dependency does not answer."},
		},
	}, h.ready)
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
