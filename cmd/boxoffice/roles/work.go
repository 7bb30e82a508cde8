package roles

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/consumers"
	"boxoffice/domain/payments"
	"boxoffice/domain/payments/sandbox"
	"boxoffice/domain/purchase"
	"boxoffice/domain/tickets"
	"boxoffice/domain/webhooks"
	"boxoffice/platform/bus"
	"boxoffice/platform/db"
)

// workDeps is what the workers are built from.
type workDeps struct {
	cfg      Config
	pool     *pgxpool.Pool
	js       jetstream.JetStream
	logger   *slog.Logger
	reg      prometheus.Registerer
	provider payments.Provider
	sandbox  *sandbox.Sandbox // nil unless BOXOFFICE_PAYMENTS=sandbox
}

// component is one worker `boxoffice work` runs: a durable consumer or a
// loop.
type component struct {
	name  string
	build func(d workDeps) (func(context.Context) error, error)
}

// components lists every worker of the product, in docs/saga.md's terms.
func components() []component {
	consumer := func(c *consumers.Consumer, err error) (func(context.Context) error, error) {
		if err != nil {
			return nil, err
		}
		return c.Run, nil
	}
	base := func(d workDeps) consumers.Config {
		return consumers.Config{Logger: d.logger, Registerer: d.reg, Bus: bus.ForCell(d.cfg.Cell)}
	}
	return []component{
		{consumers.PurchaseSagaName, func(d workDeps) (func(context.Context) error, error) {
			saga := purchase.NewSaga(purchase.SagaConfig{Logger: d.logger})
			return consumer(consumers.NewPurchaseSaga(d.pool, d.js, base(d), saga))
		}},
		{consumers.PaymentCommandsName, func(d workDeps) (func(context.Context) error, error) {
			pc, err := consumers.NewPaymentCommands(consumers.PaymentCommandsConfig{
				Provider: d.provider, ProviderName: d.cfg.Payments, Logger: d.logger,
			})
			if err != nil {
				return nil, err
			}
			cfg := consumers.PaymentCommandsConsumerConfig()
			cfg.Logger, cfg.Registerer, cfg.Bus = d.logger, d.reg, bus.ForCell(d.cfg.Cell)
			return consumer(consumers.NewExternal(d.pool, d.js, cfg, pc.External))
		}},
		{consumers.TicketsName, func(d workDeps) (func(context.Context) error, error) {
			if d.cfg.TicketSeed == nil {
				return nil, &configError{"BOXOFFICE_TICKET_SIGNING_KEY", "is required to sign tickets (base64 of a 32-byte Ed25519 seed)"}
			}
			signer, err := tickets.NewSigner(d.cfg.TicketSeed)
			if err != nil {
				return nil, err
			}
			issuer := tickets.NewIssuer(tickets.IssuerConfig{Signer: signer, Logger: d.logger})
			return consumer(consumers.NewTickets(d.pool, d.js, base(d), issuer))
		}},
		{"expiry", func(d workDeps) (func(context.Context) error, error) {
			return purchase.NewExpirer(d.pool, purchase.ExpirerConfig{Logger: d.logger, Registerer: d.reg}).Run, nil
		}},
		{consumers.WebhooksFanOutName, func(d workDeps) (func(context.Context) error, error) {
			return consumer(consumers.NewWebhooksFanOut(d.pool, d.js, base(d)))
		}},
		{"webhooks_dispatch", func(d workDeps) (func(context.Context) error, error) {
			w := d.cfg.Webhooks
			disp, err := webhooks.NewDispatcher(d.pool, webhooks.DispatcherConfig{
				Guard: &webhooks.Guard{AllowPrivate: w.AllowPrivate}, RetrySchedule: w.RetrySchedule, Timeout: w.Timeout,
				Retention: w.Retention, DisableAfter: w.DisableAfter, Logger: d.logger, Registerer: d.reg,
			})
			if err != nil {
				return nil, err
			}
			return disp.Run, nil
		}},
		{"sandbox_webhooks", func(d workDeps) (func(context.Context) error, error) {
			if d.sandbox == nil {
				return nil, nil // only with the sandbox provider
			}
			return d.sandbox.RunWebhookSender, nil
		}},
	}
}

// runWork runs `boxoffice work [-only a,b]`: the durable consumers, the
// expiry worker and (with the sandbox provider) its webhook sender, plus
// /healthz, /readyz and /metrics on OPS_ADDR. It serves one purchase cell
// (BOXOFFICE_CELL): that cell's database and bus namespace; run workers
// per cell, and a cell's workers never wait on another cell.
func runWork(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("work", flag.ExitOnError)
	only := fs.String("only", "", "comma-separated workers to run (default: all): "+strings.Join(componentNames(), ", "))
	_ = fs.Parse(args)
	var names []string
	if *only != "" {
		names = strings.Split(*only, ",")
	}
	role, err := openBusRole(ctx, "work")
	if err != nil {
		return err
	}
	defer role.Close()
	provider, sandbox, err := newProvider(role.cfg, role.pool, role.logger)
	if err != nil {
		return err
	}
	runs, err := startWorkers(workDeps{
		cfg: role.cfg, pool: role.pool, js: role.js, logger: role.logger, reg: role.reg,
		provider: provider, sandbox: sandbox,
	}, names)
	if err != nil {
		return err
	}
	return role.run(ctx, runs...)
}

func componentNames() []string {
	var names []string
	for _, c := range components() {
		names = append(names, c.name)
	}
	return names
}

// startWorkers builds the named workers (all when names is empty).
func startWorkers(d workDeps, names []string) ([]func(context.Context) error, error) {
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
		run, err := c.build(d)
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
