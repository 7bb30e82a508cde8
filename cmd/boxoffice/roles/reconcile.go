package roles

import (
	"context"
	"errors"
	"flag"
	"io"
	"time"

	"boxoffice/ops/reconcile"
	"boxoffice/platform/db"
)

// runReconcile runs `boxoffice reconcile`: it compares the provider's
// PaymentIntents created in a window with local orders and emits the
// events that repair each mismatch (package reconcile); -dry-run only
// reports. Safe to run twice, or from two places at once.
func runReconcile(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	since := fs.Duration("since", 24*time.Hour, "reconcile intents created this long ago until now (ignored with -from)")
	fromFlag := fs.String("from", "", "window start, RFC 3339 (default: now - since)")
	toFlag := fs.String("to", "", "window end, RFC 3339 (default: now)")
	dryRun := fs.Bool("dry-run", false, "report the mismatches and what would repair them; write nothing")
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	to, from := time.Now(), time.Now().Add(-*since)
	var err error
	if *toFlag != "" {
		if to, err = time.Parse(time.RFC3339, *toFlag); err != nil {
			return errors.New("-to must be an RFC 3339 time such as 2027-06-01T19:30:00Z")
		}
	}
	if *fromFlag != "" {
		if from, err = time.Parse(time.RFC3339, *fromFlag); err != nil {
			return errors.New("-from must be an RFC 3339 time such as 2027-06-01T19:30:00Z")
		}
	}
	if !from.Before(to) {
		return errors.New("the window is empty: -from must be before -to")
	}
	cfg, err := LoadConfig(getenv, "DATABASE_URL")
	if err != nil {
		return err
	}
	if err := cfg.paymentsNeeds(); err != nil {
		return err // before anything is opened
	}
	logger := cfg.logger()
	pool, err := db.NewPool(ctx, db.PoolConfig{URL: cfg.DatabaseURL, MaxConns: 4, RegionEpoch: cfg.RegionEpoch})
	if err != nil {
		return err
	}
	defer pool.Close()
	provider, _, err := newProvider(cfg, pool, logger)
	if err != nil {
		return err
	}
	r, err := reconcile.Run(ctx, reconcile.Config{Pool: pool, Provider: provider, Logger: logger, DryRun: *dryRun}, from, to)
	if err != nil {
		return err
	}
	return r.Write(out)
}
