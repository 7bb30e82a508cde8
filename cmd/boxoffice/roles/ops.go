package roles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"boxoffice/handlers"
	"boxoffice/platform/bus"
	"boxoffice/platform/db"
)

// NewRegistry returns the process's metrics registry with the Go,
// process and build collectors (processCollectors) and the pool's.
func NewRegistry(pool *pgxpool.Pool) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(processCollectors()...)
	reg.MustRegister(db.NewCollector(pool))
	return reg
}

// processCollectors are the series every Boxoffice process serves: the Go
// runtime's, the process's, and boxoffice_build_info — always 1, labelled
// with the release, its commit and the Go version, so that a dashboard or
// an alert can tell which build each instance runs (a rollout half done).
func processCollectors() []prometheus.Collector {
	version, commit := buildVersion()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "boxoffice_build_info",
		Help:        "Always 1: the build this process runs, by version, commit and Go version.",
		ConstLabels: prometheus.Labels{"version": version, "commit": commit, "goversion": runtime.Version()},
	})
	info.Set(1)
	return []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), info}
}

// opsHandler serves /healthz, /readyz and /metrics on OPS_ADDR. /readyz
// reports payments, the provider's name, when it is not "" (serve, work
// and dev: see announcePayments).
func opsHandler(reg *prometheus.Registry, checks []handlers.Check, payments string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		body := map[string]any{"status": "ok"}
		results := map[string]string{}
		status := http.StatusOK
		for _, c := range checks {
			results[c.Name] = "ok"
			if err := c.Func(ctx); err != nil {
				results[c.Name] = "unavailable"
				if c.Required {
					status, body["status"] = http.StatusServiceUnavailable, "unavailable"
				}
			}
		}
		body["checks"] = results
		if payments != "" {
			body["payments"] = payments
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	})
	return mux
}

// paymentsSandboxMetric is the gauge announcePayments registers.
const paymentsSandboxMetric = "boxoffice_payments_sandbox"

// announcePayments makes the payment provider of a role that moves money
// (serve, work, dev) known beyond its configuration: a gauge,
// boxoffice_payments_sandbox, 1 with the sandbox and 0 with Stripe, on
// reg; and with the sandbox a warning at start, since its routes let
// buyers authorize their own payments. /readyz reports the provider too
// (opsHandler, handlers.Config.Payments).
func announcePayments(ctx context.Context, cfg Config, logger *slog.Logger, reg prometheus.Registerer) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: paymentsSandboxMetric,
		Help: "1 when the payment provider is the sandbox (BOXOFFICE_PAYMENTS=sandbox), whose routes let buyers authorize their own payments: never in production. 0 with Stripe.",
	})
	if cfg.Payments == "sandbox" {
		g.Set(1)
		logger.WarnContext(ctx, "payments: the sandbox (BOXOFFICE_PAYMENTS=sandbox) lets buyers authorize their own payments; for development and tests only, never production",
			"payments", cfg.Payments)
	}
	reg.MustRegister(g)
}

// natsCheck reports whether the connection is up.
func natsCheck(nc *nats.Conn) func(context.Context) error {
	return func(context.Context) error {
		if s := nc.Status(); s != nats.CONNECTED {
			return fmt.Errorf("nats connection is %s", s)
		}
		return nil
	}
}

// ConnectBus connects to NATS and provisions the streams, retrying the
// provisioning while the server is not reachable yet, so that a role may
// start before NATS does.
func ConnectBus(ctx context.Context, cfg Config, role string, logger *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	nc, js, err := bus.Connect(cfg.NATSURL, "boxoffice-"+role, logger, cfg.natsOptions()...)
	if err != nil {
		return nil, nil, err
	}
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = bus.Provision(pctx, js, cfg.Streams)
		cancel()
		if err == nil {
			return nc, js, nil
		}
		if ctx.Err() != nil {
			nc.Close()
			return nil, nil, errors.Join(ctx.Err(), err)
		}
		if attempt == 1 || attempt%10 == 0 {
			logger.WarnContext(ctx, "streams not provisioned yet; retrying", "error", err.Error(), "attempt", attempt)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// natsOptions are the connection options every role's NATS connection
// takes from cfg: the credentials file, when NATS_CREDS names one.
func (c Config) natsOptions() []nats.Option {
	if c.NATSCreds == "" {
		return nil
	}
	return []nats.Option{nats.UserCredentials(c.NATSCreds)}
}
