package roles

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/ops/failover"
	"boxoffice/platform/bus"
	"boxoffice/platform/db"
	"boxoffice/platform/promreg"
)

// failoverUsage lists the steps of `boxoffice failover`, in the order an
// operator runs them (docs/failover.md).
const failoverUsage = `usage: boxoffice failover <step> [flags]

before: in the standby region, once (safe to run again)
  mirror   -upstream-domain D   on the standby (NATS_URL): mirror the cell's streams from the primary's JetStream domain D

steps, in order (each safe to run twice):
  stop     -epoch N+1  on the old primary (DATABASE_URL): pause every onsale of the cell, fence at N+1
  status               on the standby (DATABASE_URL, NATS_URL): print the recovery point
  promote  -epoch N+1  on the standby: store the recovery point, promote database and streams, fence, keep onsales paused
  resume   -epoch N+1  on the new primary, once smoke passes: reopen the onsales the failover paused
  watch                in the standby region, all along: serve the replica and stream copy lag on OPS_ADDR /metrics

BOXOFFICE_PRIMARY_DATABASE_URL and BOXOFFICE_PRIMARY_NATS_URL, when set and
answering, let status and promote measure the lag against the old primary.`

// runFailover runs `boxoffice failover <step>`.
func runFailover(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(out, failoverUsage)
		if len(args) == 0 {
			return &UsageError{errors.New("failover needs a step: stop, status, promote or resume")}
		}
		return flag.ErrHelp
	}
	step, args := args[0], args[1:]
	fs := flag.NewFlagSet("failover "+step, flag.ContinueOnError)
	epoch := fs.Int64("epoch", 0, "the new region epoch: the old primary's plus one (stop, promote, resume)")
	wait := fs.Duration("wait", time.Minute, "promote: how long to wait for the database's promotion")
	upstream := fs.String("upstream-domain", "", "mirror: the primary region's JetStream domain")
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	if step == "mirror" {
		return mirrorStreams(ctx, getenv, *upstream, out)
	}
	if step != "status" && step != "watch" && *epoch < 2 {
		return &UsageError{errors.New("-epoch N is required, N >= 2 (the old primary's epoch plus one)")}
	}
	cfg, pool, err := operatorPool(ctx, getenv, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	switch step {
	case "stop":
		res, err := failover.Stop(ctx, pool, *epoch)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "onsales paused by this run: %d\n", len(res.Paused))
		fmt.Fprintf(out, "region epoch %d (was %d): processes on an older epoch can no longer write here\n", res.Fenced.After, res.Fenced.Before)
		return nil
	case "resume":
		ids, err := failover.Resume(ctx, pool, *epoch)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "onsales reopened: %d\n", len(ids))
		return nil
	case "status", "promote", "watch":
	default:
		return &UsageError{fmt.Errorf("unknown failover step %q: mirror, stop, status, promote, resume or watch", step)}
	}
	if cfg.NATSURL == "" {
		return errors.New("NATS_URL (the standby's NATS) is required")
	}
	src, closeAll, err := failoverSources(ctx, cfg, getenv, pool)
	if err != nil {
		return err
	}
	defer closeAll()
	if step == "watch" {
		return watchFailover(ctx, cfg, src, out)
	}
	if step == "status" {
		rp, err := failover.Measure(ctx, src)
		if err != nil {
			return err
		}
		return rp.Write(out)
	}
	res, err := failover.Promote(ctx, failover.PromoteParams{Sources: src, Epoch: *epoch, Streams: cfg.Streams, Wait: *wait})
	if err != nil {
		return err
	}
	return res.Write(out)
}

// mirrorStreams runs `boxoffice failover mirror`: the standby's JetStream
// (NATS_URL) gets a mirror of each of the cell's two streams in the
// primary's domain, reached over the regions' leafnode link
// (bus.ProvisionStandby). A stream that exists already — a mirror being
// kept, or one promoted since — is left as it is.
func mirrorStreams(ctx context.Context, getenv func(string) string, upstream string, out io.Writer) error {
	if upstream == "" {
		return &UsageError{errors.New("-upstream-domain is required: the primary region's JetStream domain")}
	}
	cfg, err := LoadConfig(getenv)
	if err != nil {
		return err
	}
	if cfg.NATSURL == "" {
		return errors.New("NATS_URL (the standby's NATS) is required")
	}
	nc, js, err := connectOnce(cfg.NATSURL, cfg)
	if err != nil {
		return fmt.Errorf("standby nats: %w", err)
	}
	defer nc.Close()
	if err := bus.ProvisionStandby(ctx, js, cfg.Streams, upstream); err != nil {
		return err
	}
	copies, err := bus.StandbyCopies(ctx, js, cfg.Streams.Namespace)
	if err != nil {
		return err
	}
	for _, c := range copies {
		state := "mirror of domain " + upstream
		if !c.Mirror {
			state = "promoted: left as it is"
		}
		fmt.Fprintf(out, "%s: %s, last seq %d\n", c.Stream, state, c.LastSeq)
	}
	return nil
}

// failoverSources connects to the standby's NATS and, when configured and
// answering within a few seconds, to the old primary's database and NATS.
func failoverSources(ctx context.Context, cfg Config, getenv func(string) string, standby *pgxpool.Pool) (failover.Sources, func(), error) {
	src := failover.Sources{Standby: standby, Namespace: cfg.Streams.Namespace}
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	nc, js, err := connectOnce(cfg.NATSURL, cfg)
	if err != nil {
		return src, closeAll, fmt.Errorf("standby nats: %w", err)
	}
	closers = append(closers, nc.Close)
	src.StandbyJS = js
	if u := getenv(primaryDatabaseURLVar); u != "" {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		p, err := db.NewPool(pctx, db.PoolConfig{URL: u, MaxConns: 1})
		cancel()
		if err == nil {
			closers = append(closers, p.Close)
			src.Primary = p
		}
	}
	if u := getenv(primaryNATSURLVar); u != "" {
		if pnc, pjs, err := connectOnce(u, cfg); err == nil {
			closers = append(closers, pnc.Close)
			src.PrimaryJS = pjs
		}
	}
	return src, closeAll, nil
}

// connectOnce connects to NATS without retrying: an operator command must
// learn at once that a region does not answer.
func connectOnce(url string, cfg Config) (*nats.Conn, jetstream.JetStream, error) {
	opts := append([]nats.Option{nats.Name("boxoffice-failover"), nats.Timeout(3 * time.Second), nats.NoReconnect()}, cfg.natsOptions()...)
	return bus.Dial(url, opts...)
}

// watchFailover serves the recovery point as metrics (failover.Collector)
// on OPS_ADDR until ctx is done: the replica's replay lag and the stream
// copies' lag, measured at each scrape. The old primary's database and
// NATS are used when they answered at start.
func watchFailover(ctx context.Context, cfg Config, src failover.Sources, out io.Writer) error {
	reg := prometheus.NewRegistry()
	promreg.Register(reg, &failover.Collector{Sources: src})
	ln, err := net.Listen("tcp", cfg.OpsAddr)
	if err != nil {
		return fmt.Errorf("listen on OPS_ADDR: %w", err)
	}
	srv := &http.Server{Handler: opsHandler(reg, nil, ""), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(out, "serving the standby's lag on http://%s/metrics\n", ln.Addr())
	return serveUntilDone(ctx, srv, ln, "metrics", 5*time.Second)
}
