package roles

import (
	"cmp"
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
	"boxoffice/domain/tickets"
	"boxoffice/domain/waitingroom"
	"boxoffice/domain/waitlist"
	"boxoffice/domain/webhooks"
	"boxoffice/handlers"
	"boxoffice/platform/apikey"
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
func openCells(ctx context.Context, cfg Config, logger *slog.Logger, reg *prometheus.Registry, js jetstream.JetStream) (_ *servedCells, err error) {
	s := &servedCells{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	multi := len(cfg.Cells) > 1
	var list []*cells.Cell
	for _, cc := range cfg.Cells {
		clog := logger.With("cell", cc.Name)
		var creg prometheus.Registerer = reg
		var opts WaitingRoomOpts
		if multi {
			creg = prometheus.WrapRegistererWith(prometheus.Labels{"cell": cc.Name}, reg)
			opts.RedisPrefix = "boxoffice:cell:" + cc.Name + ":"
		}
		pool, err := db.NewPool(ctx, cfg.PoolConfig(cc.DatabaseURL))
		if err != nil {
			return nil, err
		}
		s.closes = append(s.closes, pool.Close)
		db.CheckConnectionBudget(ctx, pool, clog)
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
		c, err := BuildCell(ctx, cfg, CellDeps{
			Name: cc.Name, Pool: pool, Logger: clog, Reg: creg, Provider: provider, Sandbox: sandbox, JS: js, Room: &opts,
		})
		if err != nil {
			return nil, err
		}
		s.closes = append(s.closes, c.Close)
		s.runs = append(s.runs, c.Runs...)
		c.Organizers = cc.Organizers
		list = append(list, c.Cell)
	}
	router, err := cells.NewRouter(list...)
	if err != nil {
		return nil, err
	}
	s.router = router
	return s, nil
}

// CellDeps are the parts of one purchase cell: BuildCell builds the cell's
// services (its API side) from them, startWorkers its workers.
type CellDeps struct {
	// Name is the cell's name: BOXOFFICE_CELL, or one of BOXOFFICE_CELLS.
	Name string
	// Pool is the cell's database; the caller opens and closes it.
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// Reg, when not nil, receives the cell's metrics (its Stripe
	// ingress's and its waiting room's).
	Reg prometheus.Registerer
	// Provider is what the Stripe ingress consults when a webhook
	// disagrees with an order; Sandbox, when not nil, adds the sandbox's
	// buyer actions (BOXOFFICE_PAYMENTS=sandbox).
	Provider payments.Provider
	Sandbox  *sandbox.Sandbox
	// JS, when not nil, wakes the order event streams through the cell's
	// order feed, and gives the release controller the backlog of the
	// cell's consumers unless Room.Pending is set. Nil: the streams read
	// their order on a schedule.
	JS jetstream.JetStream
	// Room, when not nil, makes the cell's waiting room NewWaitingRoom's
	// (Redis when REDIS_URL is set, a release controller on the cell's
	// signals) with these options. Nil: an in-process room at a fixed
	// rate with no admitter or controller running and no organizer
	// settings, enough for bench holds, which admits a few buyers at
	// once.
	Room *WaitingRoomOpts
}

// BuiltCell is a cell with what runs and what closes it.
type BuiltCell struct {
	*cells.Cell
	// Runs are the cell's waiting-room admitter and release controller
	// (with CellDeps.Room) and its order feed (with CellDeps.JS); each returns
	// when its context is done.
	Runs []func(context.Context) error
	// Redis is the waiting room's Redis client (nil in process).
	Redis *redis.Client
	// Close releases the waiting room's Redis client; the pool is the
	// caller's.
	Close func()
}

// BuildCell builds every service of one purchase cell on d.Pool from cfg
// (its hold TTL, webhook limits, Stripe webhook secret, admission key,
// ticket signing key and waiting-room settings): the one construction of a cell, for serve
// (through openCells), dev, the benchmarks and the tests.
func BuildCell(ctx context.Context, cfg Config, d CellDeps) (*BuiltCell, error) {
	cfg.Cell = d.Name
	b := &BuiltCell{Cell: &cells.Cell{
		Name:     d.Name,
		Pool:     d.Pool,
		Catalog:  catalog.New(d.Pool).WithSeatMapCache(time.Second).WithEventCache(time.Minute, 5*time.Second),
		Purchase: purchase.NewService(d.Pool, d.Logger, purchase.Config{HoldTTL: cfg.HoldTTL}),
		Sandbox:  d.Sandbox,
		APIKeys:  apikey.NewStore(d.Pool),
	}, Close: func() {}}
	b.Waitlist = waitlist.New(d.Pool, b.Purchase, waitlist.Config{OfferTTL: cfg.WaitlistOfferTTL, Logger: d.Logger})
	// Without a key to seal their secrets there are no webhook endpoints:
	// the routes answer 404 (serve requires the key; benchmarks need none).
	if cfg.Webhooks.SecretKeys != nil {
		b.Webhooks = webhooks.NewService(d.Pool, webhooks.ServiceConfig{
			Guard: &webhooks.Guard{AllowPrivate: cfg.Webhooks.AllowPrivate}, Keys: cfg.Webhooks.SecretKeys,
			Logger: d.Logger, MaxEndpoints: cfg.Webhooks.MaxEndpoints,
		})
	}
	if cfg.TicketSeed != nil {
		b.Door = tickets.NewDoor(d.Pool, ed25519.NewKeyFromSeed(cfg.TicketSeed).Public().(ed25519.PublicKey))
	}
	if cfg.StripeWebhookSecret != "" {
		ic := payments.IngressConfig{
			WebhookSecret: cfg.StripeWebhookSecret, Logger: d.Logger, Provider: d.Provider, Registerer: d.Reg,
			PaymentGrace: cmp.Or(cfg.PaymentGrace, -1), // 0 configured: no grace
		}
		// With the signing key, a capture webhook tickets its order in
		// its own transaction; without it, the workers' tickets consumer
		// does, one hop later.
		if cfg.TicketSeed != nil {
			signer, err := tickets.NewSigner(cfg.TicketSeed)
			if err != nil {
				return nil, err
			}
			ic.Tickets = tickets.NewIssuer(tickets.IssuerConfig{Signer: signer, Logger: d.Logger, Registerer: d.Reg})
		}
		b.Ingress = payments.NewIngress(d.Pool, ic)
	}
	if d.Room == nil {
		b.Room = waitingroom.NewRoom(waitingroom.RoomConfig{
			Store: waitingroom.NewMemoryStore(), Signer: cfg.admissionSigner(),
			Events: b.Catalog, Logger: d.Logger,
		})
	} else {
		opts := *d.Room
		if opts.Pending == nil && d.JS != nil {
			opts.Pending = consumerPendingIn(d.JS, bus.ForCell(d.Name))
		}
		wr, err := NewWaitingRoom(ctx, cfg, d.Pool, d.Logger, d.Reg, opts)
		if err != nil {
			return nil, fmt.Errorf("waiting room of cell %s: %w", d.Name, err)
		}
		b.Room, b.Redis, b.Close = wr.room, wr.rdb, wr.close
		b.Runs = append(b.Runs, func(ctx context.Context) error { return wr.run(db.WithRole(ctx, "waiting room")) })
	}
	if d.JS != nil {
		b.Orders = orderfeed.New(orderfeed.Config{JetStream: d.JS, Bus: bus.ForCell(d.Name), Logger: d.Logger})
		b.Runs = append(b.Runs, b.Orders.Run)
	}
	return b, nil
}

// NewAPI returns the handlers of the cells of router, configured from cfg
// (JWT secret, admission key, ticket signing key, per-buyer and per-address
// limits): the one construction of the API, for serve, dev, the
// benchmarks and the tests. reg, when not nil, receives the API's
// metrics; checks, and the payment provider, are what /readyz reports.
func NewAPI(cfg Config, router *cells.Router, logger *slog.Logger, reg prometheus.Registerer, checks []handlers.Check) *handlers.Handlers {
	hc := handlers.Config{
		Cells:      router,
		Logger:     logger,
		Bearer:     cfg.bearer,
		Admission:  cfg.admissionSigner(),
		Checks:     checks,
		Payments:   cfg.Payments,
		Registerer: reg,

		HoldsPerSecond:      cfg.HoldRateLimit,
		EventReadsPerSecond: cfg.EventReadIPLimit,
		CORSOrigins:         cfg.CORSOrigins,
	}
	if hc.Bearer == nil {
		hc.Bearer = auth.NewVerifier(cfg.JWTSecret)
	}
	if cfg.TicketSeed != nil {
		hc.TicketPublicKey = ed25519.NewKeyFromSeed(cfg.TicketSeed).Public().(ed25519.PublicKey)
	}
	return handlers.New(hc)
}
