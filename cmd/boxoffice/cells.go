package main

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/bus"
	"boxoffice/cells"
	"boxoffice/db"
	"boxoffice/handlers"
	"boxoffice/orderfeed"
	"boxoffice/payments"
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
		if js != nil {
			opts.pending = consumerPendingIn(js, bus.ForCell(cc.Name))
		}
		// The Stripe ingress re-reads intents from the provider when a
		// webhook disagrees with an order, so receiving webhooks needs the
		// provider.
		var provider payments.Provider
		var sandbox *payments.Sandbox
		if cfg.StripeWebhookSecret != "" {
			if provider, sandbox, err = newProvider(cfg, pool, clog); err != nil {
				return nil, err
			}
		}
		ccfg := cfg
		ccfg.Cell = cc.Name
		wr, err := newWaitingRoom(ctx, ccfg, pool, clog, creg, opts)
		if err != nil {
			return nil, err
		}
		s.closes = append(s.closes, wr.close)
		s.runs = append(s.runs, wr.run)
		c := newCell(ccfg, cc.Name, pool, clog, creg, provider, sandbox)
		c.Room = wr.room
		if js != nil {
			// Order event streams are woken by the cell's order events;
			// without NATS they read their orders on a schedule.
			c.Orders = orderfeed.New(orderfeed.Config{JetStream: js, Bus: bus.ForCell(cc.Name), Logger: clog})
			s.runs = append(s.runs, c.Orders.Run)
		}
		list = append(list, c)
	}
	router, err := cells.NewRouter(list...)
	if err != nil {
		return nil, err
	}
	s.router = router
	return s, nil
}
