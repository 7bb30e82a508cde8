package handlers

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
)

// HealthOutput is the body of /healthz and /readyz.
type HealthOutput struct {
	Body struct {
		Status string `json:"status" enum:"ok,unavailable" doc:"ok when the process (liveness) or its dependencies (readiness) answer."`
	}
}

func (h *Handlers) registerHealth(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "get-healthz", Method: http.MethodGet, Path: "/healthz",
		Summary: "Liveness: the process is up", Tags: []string{"Operations"},
	}, func(ctx context.Context, _ *struct{}) (*HealthOutput, error) {
		out := &HealthOutput{}
		out.Body.Status = "ok"
		return out, nil
	})
	huma.Register(api, huma.Operation{
		OperationID: "get-readyz", Method: http.MethodGet, Path: "/readyz",
		Summary: "Readiness: the database and the bus answer", Tags: []string{"Operations"},
		Errors: []int{http.StatusServiceUnavailable},
	}, func(ctx context.Context, _ *struct{}) (*HealthOutput, error) {
		if err := h.cfg.Ready(ctx); err != nil {
			h.logger.WarnContext(ctx, "not ready", "error", err.Error())
			return nil, problem(http.StatusServiceUnavailable, TypeUnavailable, "A dependency is not answering.")
		}
		out := &HealthOutput{}
		out.Body.Status = "ok"
		return out, nil
	})
}
