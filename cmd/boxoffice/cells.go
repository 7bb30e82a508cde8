package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"boxoffice/domain/catalog"
	"boxoffice/domain/cells"
	"boxoffice/domain/payments"
	"boxoffice/domain/payments/sandbox"
	"boxoffice/domain/purchase"
	"boxoffice/domain/waitingroom"
	"boxoffice/domain/webhooks"
	"boxoffice/handlers"
	"boxoffice/platform/admission"
	"boxoffice/platform/auth"
	"boxoffice/platform/bus"
	"boxoffice/platform/db"
	"boxoffice/platform/orderfeed"
)

// servedCells is every purchase cell an API process serves, with what runs
// them (each cell's waiting-room admitter and release controller).
type servedCells struct {
	router *cells.Router
	// checks are the cells' databases for /readyz. With several cells,
	// none is required: a cell that is down must not take the others'
	// API processes out of the load balancer.
	checks []handlers.Check
	runs   []func(context.Context) error
	closes []func()
}

func (s *servedCells) close() {
	for i := len(s.closes) - 1; i >= 0; i-- {
		s.closes[i]()
	}
}

func (s *servedCells) names() []string {
	var names []string
	for _, c := range s.router.Cells() {
		names = append(names, c.Name)
	}
	return names
}

// openCells opens every cell of cfg.Cells: its pool (under this process's
// region epoch), services, payment provider and waiting room, whose
// release controller reads that cell's own signals (database, outbox and
// its bus namespace's consumers when js is not nil). With one cell the
// metrics are as they always were; with several, each cell's carry a
// cell label and its waiting room its own Redis key prefix.
func openCells(ctx context.Context, cfg config, logger *slog.Logger, reg *prometheus.Registry, js jetstream.JetStream) (_ *servedCells, err error) {
	s := &servedCells{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	multi := len(cfg.Cells) > 1
	var list []*cells.Cell
	for _, cc := range cfg.Cells {
		clog := logger
		var creg prometheus.Registerer = reg
		var opts waitingRoomOpts
		if multi {
			clog = logger.With("cell", cc.Name)
			creg = prometheus.WrapRegistererWith(prometheus.Labels{"cell": cc.Name}, reg)
			opts.redisPrefix = "boxoffice:cell:" + cc.Name + ":"
		}
		pool, err := db.NewPool(ctx, db.PoolConfig{URL: cc.DatabaseURL, MaxConns: cfg.DBMaxConns, RegionEpoch: cfg.RegionEpoch})
		if err != nil {
			return nil, err
		}
		s.closes = append(s.closes, pool.Close)
		creg.MustRegister(db.NewCollector(pool))
		name := "database"
		if multi {
			name = "database_" + cc.Name
		}
		s.checks = append(s.checks, handlers.Check{Name: name, Func: pool.Ping, Required: !multi})
		// The Stripe ingress re-reads intents from the provider when a
		// webhook disagrees with an order, so receiving webhooks needs the
		// provider.
		var provider payments.Provider
		var sandbox *sandbox.Sandbox
		if cfg.StripeWebhookSecret != "" {
			if provider, sandbox, err = newProvider(cfg, pool, clog); err != nil {
				return nil, err
			}
		}
		c, err := buildCell(ctx, cfg, cellDeps{
			name: cc.Name, pool: pool, logger: clog, reg: creg, provider: provider, sandbox: sandbox, js: js, room: &opts,
		})
		if err != nil {
			return nil, err
		}
		s.closes = append(s.closes, c.close)
		s.runs = append(s.runs, c.runs...)
		list = append(list, c.Cell)
	}
	router, err := cells.NewRouter(list...)
	if err != nil {
		return nil, err
	}
	s.router = router
	return s, nil
}

// cellDeps is what buildCell builds one purchase cell from.
type cellDeps struct {
	// name is the cell's name: BOXOFFICE_CELL, or one of BOXOFFICE_CELLS.
	name string
	// pool is the cell's database; the caller opens and closes it.
	pool   *pgxpool.Pool
	logger *slog.Logger
	// reg, when not nil, receives the cell's metrics (its Stripe
	// ingress's and its waiting room's).
	reg prometheus.Registerer
	// provider is what the Stripe ingress consults when a webhook
	// disagrees with an order; sandbox, when not nil, adds the sandbox's
	// buyer actions (BOXOFFICE_PAYMENTS=sandbox).
	provider payments.Provider
	sandbox  *sandbox.Sandbox
	// js, when not nil, wakes the order event streams through the cell's
	// order feed, and gives the release controller the backlog of the
	// cell's consumers unless room.pending is set. Nil: the streams read
	// their order on a schedule.
	js jetstream.JetStream
	// room, when not nil, makes the cell's waiting room newWaitingRoom's
	// (Redis when REDIS_URL is set, a release controller on the cell's
	// signals) with these options. Nil: an in-process room at a fixed
	// rate with no admitter or controller running and no organizer
	// settings, enough for bench holds, which admits a few buyers at
	// once.
	room *waitingRoomOpts
}

// builtCell is a cell with what runs and what closes it.
type builtCell struct {
	*cells.Cell
	// runs are the cell's waiting-room admitter and release controller
	// (with deps.room) and its order feed (with deps.js); each returns
	// when its context is done.
	runs []func(context.Context) error
	// rdb is the waiting room's Redis client (nil in process).
	rdb *redis.Client
	// close releases the waiting room's Redis client; the pool is the
	// caller's.
	close func()
}

// buildCell builds every service of one purchase cell on d.pool from cfg
// (its hold TTL, webhook limits, Stripe webhook secret, admission key and
// waiting-room settings): the one construction of a cell, for serve
// (through openCells), dev, the benchmarks and the tests.
func buildCell(ctx context.Context, cfg config, d cellDeps) (*builtCell, error) {
	cfg.Cell = d.name
	b := &builtCell{Cell: &cells.Cell{
		Name:     d.name,
		Pool:     d.pool,
		Catalog:  catalog.New(d.pool).WithSeatMapCache(time.Second).WithEventCache(time.Minute, 5*time.Second),
		Purchase: purchase.NewService(d.pool, d.logger, purchase.Config{HoldTTL: cfg.HoldTTL}),
		Webhooks: webhooks.NewService(d.pool, webhooks.ServiceConfig{
			Guard: &webhooks.Guard{AllowPrivate: cfg.Webhooks.AllowPrivate}, Logger: d.logger, MaxEndpoints: cfg.Webhooks.MaxEndpoints,
		}),
		Sandbox: d.sandbox,
	}, close: func() {}}
	if cfg.StripeWebhookSecret != "" {
		ic := payments.IngressConfig{WebhookSecret: cfg.StripeWebhookSecret, Logger: d.logger, Provider: d.provider, Registerer: d.reg}
		b.Ingress = payments.NewIngress(d.pool, ic)
	}
	if d.room == nil {
		b.Room = waitingroom.NewRoom(waitingroom.RoomConfig{
			Store: waitingroom.NewMemoryStore(), Signer: admission.NewSigner(admission.SignerConfig{Key: cfg.AdmissionKey}),
			Events: b.Catalog, Logger: d.logger,
		})
	} else {
		opts := *d.room
		if opts.pending == nil && d.js != nil {
			opts.pending = consumerPendingIn(d.js, bus.ForCell(d.name))
		}
		wr, err := newWaitingRoom(ctx, cfg, d.pool, d.logger, d.reg, opts)
		if err != nil {
			return nil, fmt.Errorf("waiting room of cell %s: %w", d.name, err)
		}
		b.Room, b.rdb, b.close = wr.room, wr.rdb, wr.close
		b.runs = append(b.runs, func(ctx context.Context) error { return wr.run(db.WithRole(ctx, "waiting room")) })
	}
	if d.js != nil {
		b.Orders = orderfeed.New(orderfeed.Config{JetStream: d.js, Bus: bus.ForCell(d.name), Logger: d.logger})
		b.runs = append(b.runs, b.Orders.Run)
	}
	return b, nil
}

// newAPI returns the handlers of the cells of router, configured from cfg
// (JWT secret, admission key, ticket signing key, per-buyer and per-address
// limits): the one construction of the API, for serve, dev, the
// benchmarks and the tests. reg, when not nil, receives the API's
// metrics; checks are what /readyz reports.
func newAPI(cfg config, router *cells.Router, logger *slog.Logger, reg prometheus.Registerer, checks []handlers.Check) *handlers.Handlers {
	hc := handlers.Config{
		Cells:      router,
		Logger:     logger,
		Bearer:     auth.NewVerifier(cfg.JWTSecret),
		Admission:  admission.NewSigner(admission.SignerConfig{Key: cfg.AdmissionKey}),
		Checks:     checks,
		Registerer: reg,

		HoldsPerSecond:      cfg.HoldRateLimit,
		EventReadsPerSecond: cfg.EventReadIPLimit,
	}
	if cfg.TicketSeed != nil {
		hc.TicketPublicKey = ed25519.NewKeyFromSeed(cfg.TicketSeed).Public().(ed25519.PublicKey)
	}
	return handlers.New(hc)
}
