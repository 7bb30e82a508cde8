package roles

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"flag"
	"fmt"
	"slices"
	"strings"

	"boxoffice/consumers"
	"boxoffice/domain/payments"
	"boxoffice/domain/purchase"
	"boxoffice/domain/tickets"
	"boxoffice/domain/waitlist"
	"boxoffice/domain/webhooks"
	"boxoffice/ops/dlq"
	"boxoffice/ops/reconcile"
	"boxoffice/ops/retention"
	"boxoffice/platform/bus"
	"boxoffice/platform/db"
)

// component is one worker `boxoffice work` runs: a durable consumer or a
// loop. It is built from the same parts as the cell's API side
// (CellDeps: the cell's name, pool, bus, logger, registerer and payment
// provider; Room is not used) and cfg.
type component struct {
	name  string
	build func(cfg Config, d CellDeps) (func(context.Context) error, error)
}

// components lists every worker of the product, in docs/saga.md's terms.
func components() []component {
	consumer := func(c *consumers.Consumer, err error) (func(context.Context) error, error) {
		if err != nil {
			return nil, err
		}
		return c.Run, nil
	}
	base := func(d CellDeps) consumers.Config {
		return consumers.Config{Logger: d.Logger, Registerer: d.Reg, Bus: bus.ForCell(d.Name)}
	}
	return []component{
		{consumers.PurchaseSagaName, func(cfg Config, d CellDeps) (func(context.Context) error, error) {
			saga := purchase.NewSaga(purchase.SagaConfig{Logger: d.Logger})
			return consumer(consumers.NewPurchaseSaga(d.Pool, d.JS, base(d), saga))
		}},
		{consumers.PaymentCommandsName, func(cfg Config, d CellDeps) (func(context.Context) error, error) {
			pc, err := payments.NewCommands(payments.CommandsConfig{
				Provider: d.Provider, ProviderName: cfg.Payments, Logger: d.Logger,
			})
			if err != nil {
				return nil, err
			}
			cc := consumers.PaymentCommandsConsumerConfig()
			cc.Logger, cc.Registerer, cc.Bus = d.Logger, d.Reg, bus.ForCell(d.Name)
			return consumer(consumers.NewExternal(d.Pool, d.JS, cc, consumers.PaymentCommandsFunc(pc)))
		}},
		{consumers.TicketsName, func(cfg Config, d CellDeps) (func(context.Context) error, error) {
			if cfg.TicketSeed == nil {
				return nil, &configError{"BOXOFFICE_TICKET_SIGNING_KEY", "is required to sign tickets (base64 of a 32-byte Ed25519 seed)"}
			}
			signer, err := tickets.NewSigner(cfg.TicketSeed)
			if err != nil {
				return nil, err
			}
			issuer := tickets.NewIssuer(tickets.IssuerConfig{Signer: signer, Logger: d.Logger, Registerer: d.Reg})
			return consumer(consumers.NewTickets(d.Pool, d.JS, base(d), issuer))
		}},
		{"expiry", func(cfg Config, d CellDeps) (func(context.Context) error, error) {
			return purchase.NewExpirer(d.Pool, purchase.ExpirerConfig{Logger: d.Logger, Registerer: d.Reg}).Run, nil
		}},
		{consumers.WaitlistName, func(cfg Config, d CellDeps) (func(context.Context) error, error) {
			return consumer(consumers.NewWaitlist(d.Pool, d.JS, base(d), newWaitlist(cfg, d)))
		}},
		{"waitlist_sweeper", func(cfg Config, d CellDeps) (func(context.Context) error, error) {
			return waitlist.NewSweeper(newWaitlist(cfg, d), waitlist.SweeperConfig{}).Run, nil
		}},
		{consumers.WebhooksFanOutName, func(cfg Config, d CellDeps) (func(context.Context) error, error) {
			return consumer(consumers.NewWebhooksFanOut(d.Pool, d.JS, base(d)))
		}},
		{"webhooks_dispatch", func(cfg Config, d CellDeps) (func(context.Context) error, error) {
			w := cfg.Webhooks
			if w.SecretKeys == nil {
				return nil, errNoWebhookKeys
			}
			disp, err := webhooks.NewDispatcher(d.Pool, webhooks.DispatcherConfig{
				Guard: &webhooks.Guard{AllowPrivate: w.AllowPrivate}, Keys: w.SecretKeys, RetrySchedule: w.RetrySchedule, Timeout: w.Timeout,
				Retention: w.Retention, DisableAfter: w.DisableAfter, Logger: d.Logger, Registerer: d.Reg,
			})
			if err != nil {
				return nil, err
			}
			return disp.Run, nil
		}},
		// Endpoint secrets not sealed under the first key of
		// BOXOFFICE_WEBHOOK_SECRET_KEYS (legacy plaintext, or an older key)
		// are sealed anew at start and every 10 minutes, in batches.
		{"webhooks_secrets", func(cfg Config, d CellDeps) (func(context.Context) error, error) {
			if cfg.Webhooks.SecretKeys == nil {
				return nil, errNoWebhookKeys
			}
			r, err := webhooks.NewResealer(d.Pool, webhooks.ResealerConfig{Keys: cfg.Webhooks.SecretKeys, Logger: d.Logger, Registerer: d.Reg})
			if err != nil {
				return nil, err
			}
			return r.Run, nil
		}},
		{"retention", func(cfg Config, d CellDeps) (func(context.Context) error, error) {
			p, err := retention.New(d.Pool, retention.Config{
				Inbox: cfg.InboxRetention, StripeEvents: cfg.StripeEventRetention, Logger: d.Logger, Registerer: d.Reg,
			})
			if err != nil {
				return nil, err
			}
			return p.Run, nil
		}},
		{"reconcile", func(cfg Config, d CellDeps) (func(context.Context) error, error) {
			return reconcile.NewSchedule(reconcile.ScheduleConfig{
				Pool: d.Pool, Provider: d.Provider, Interval: cfg.ReconcileInterval, Logger: d.Logger, Registerer: d.Reg,
			}).Run, nil
		}},
		{"sandbox_webhooks", func(cfg Config, d CellDeps) (func(context.Context) error, error) {
			if d.Sandbox == nil {
				return nil, nil // only with the sandbox provider
			}
			return d.Sandbox.RunWebhookSender, nil
		}},
	}
}

// runWork runs `boxoffice work [-only a,b]`: the durable consumers, the
// expiry worker and (with the sandbox provider) its webhook sender, plus
// /healthz, /readyz and /metrics on OPS_ADDR. It serves one purchase cell
// (BOXOFFICE_CELL): that cell's database and bus namespace; run workers
// per cell, and a cell's workers never wait on another cell.
func runWork(ctx context.Context, args []string, getenv func(string) string) error {
	fs := flag.NewFlagSet("work", flag.ContinueOnError)
	only := fs.String("only", "", "comma-separated workers to run (default: all): "+strings.Join(componentNames(), ", "))
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	var names []string
	if *only != "" {
		names = strings.Split(*only, ",")
	}
	// The payment provider is checked before anything is opened: a
	// worker without one must not start.
	role, err := openBusRole(ctx, "work", getenv, Config.paymentsNeeds)
	if err != nil {
		return err
	}
	defer role.Close()
	// boxoffice_dead_letters{consumer}: what `boxoffice dlq` would list.
	role.reg.MustRegister(dlq.NewDepthCollector(dlq.New(role.js, role.cfg.Streams.Namespace, role.logger)))
	provider, sandbox, err := newProvider(role.cfg, role.pool, role.logger)
	if err != nil {
		return err
	}
	announcePayments(ctx, role.cfg, role.logger, role.reg)
	runs, err := startWorkers(role.cfg, CellDeps{
		Name: role.cfg.Cell, Pool: role.pool, JS: role.js, Logger: role.logger, Reg: role.reg,
		Provider: provider, Sandbox: sandbox,
	}, names)
	if err != nil {
		return err
	}
	return role.run(ctx, role.cfg.Payments, runs...)
}

func componentNames() []string {
	var names []string
	for _, c := range components() {
		names = append(names, c.name)
	}
	return names
}

// startWorkers builds the named workers of cell d (all when names is
// empty).
func startWorkers(cfg Config, d CellDeps, names []string) ([]func(context.Context) error, error) {
	for _, n := range names {
		if !slices.Contains(componentNames(), n) {
			return nil, fmt.Errorf("-only: unknown worker %q (known: %s)", n, strings.Join(componentNames(), ", "))
		}
	}
	var runs []func(context.Context) error
	for _, c := range components() {
		if len(names) > 0 && !slices.Contains(names, c.name) {
			continue
		}
		run, err := c.build(cfg, d)
		if err != nil {
			return nil, fmt.Errorf("worker %s: %w", c.name, err)
		}
		if run != nil {
			name := c.name
			runs = append(runs, func(ctx context.Context) error { return run(db.WithRole(ctx, name)) })
		}
	}
	return runs, nil
}

// DevTicketSeed derives the public dev seed tickets are signed with when
// BOXOFFICE_TICKET_SIGNING_KEY is unset in dev.
func DevTicketSeed() []byte {
	sum := sha256.Sum256([]byte("boxoffice-dev-ticket-signing-seed-not-for-production"))
	return sum[:ed25519.SeedSize]
}

// newWaitlist is the cell's waitlist, for its consumer and its sweeper.
func newWaitlist(cfg Config, d CellDeps) *waitlist.Service {
	return waitlist.New(d.Pool, purchase.NewService(d.Pool, d.Logger, purchase.Config{HoldTTL: cfg.HoldTTL}),
		waitlist.Config{OfferTTL: cfg.WaitlistOfferTTL, Logger: d.Logger})
}
