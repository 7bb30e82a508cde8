package roles

import (
	"context"
	"log/slog"
	"time"

	"boxoffice/platform/telemetry"
)

// StartTracing installs the process's OpenTelemetry tracer provider when
// the standard OTEL_ variables ask for it (platform/telemetry says which),
// naming the process boxoffice-<role> with its cell and region epoch, and
// returns the function that flushes the spans still buffered on the way
// out (at most 5 seconds). Call it before the pools open: their query
// tracer is chosen then. Every role calls it, and so does the benchmark's
// product.
func StartTracing(ctx context.Context, getenv func(string) string, role string, cfg Config, logger *slog.Logger) (stop func(), err error) {
	version, _ := buildVersion()
	shutdown, err := telemetry.Setup(ctx, getenv, telemetry.Process{
		Service: "boxoffice-" + role, Version: version, Cell: cfg.Cell, RegionEpoch: cfg.RegionEpoch,
	})
	if err != nil {
		return func() {}, err
	}
	if telemetry.Enabled() {
		logger.InfoContext(ctx, "tracing on: spans exported over OTLP")
	}
	return func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(flushCtx); err != nil {
			logger.WarnContext(ctx, "tracing: spans not flushed", "error", err.Error())
		}
	}, nil
}
