package roles

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"boxoffice/ops/audit"
	"boxoffice/platform/bus"
)

// errAuditFailed makes `boxoffice audit` exit non-zero after it printed a
// report in which an invariant is broken.
var errAuditFailed = errors.New("invariants broken (see the report)")

// runAudit runs `boxoffice audit`: the invariant checks of package audit
// against DATABASE_URL and, when NATS_URL is set and answers, the stream
// of its cell (BOXOFFICE_CELL); audit each cell on its own.
// It prints the report to out and fails when an invariant is broken.
func runAudit(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	var th audit.Thresholds
	fs.DurationVar(&th.OutboxAge, "outbox-age", 0, "an outbox row unpublished for longer is stuck (default 1m)")
	fs.DurationVar(&th.HoldGrace, "hold-grace", 0, "an active hold this long past its expiry is stuck (default 1m)")
	fs.DurationVar(&th.CaptureGrace, "capture-grace", 0, "a captured payment neither ticketed nor refunded for longer is stuck (default 5m)")
	fs.DurationVar(&th.DeliveryWait, "delivery-wait", 0, "a webhook delivery due this long ago and not attempted is stuck (default 10m)")
	fs.DurationVar(&th.RefundGrace, "refund-grace", 0, "a refund asked for and not confirmed by the provider for longer is stuck (default 1h)")
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	cfg, pool, err := operatorPool(ctx, getenv, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	var js jetstream.JetStream
	if cfg.NATSURL != "" {
		// The audit only reads: no provisioning, and a bus that does not
		// answer is reported, not fatal.
		logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
		nc, jsc, err := bus.Connect(cfg.NATSURL, "boxoffice-audit", logger, cfg.natsOptions()...)
		if err == nil {
			defer nc.Close()
			js = jsc
		} else {
			fmt.Fprintf(out, "NATS at NATS_URL not reachable: %v\n", err)
		}
	}
	th.Bus = cfg.Streams.Namespace // the cell of BOXOFFICE_CELL
	r, err := audit.Run(ctx, pool, js, th)
	if err != nil {
		return err
	}
	if err := r.Write(out); err != nil {
		return err
	}
	if !r.OK() {
		return errAuditFailed
	}
	return nil
}
