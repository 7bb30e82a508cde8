package roles

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"boxoffice/domain/catalog"
	"boxoffice/domain/waitingroom"
	"boxoffice/platform/bus"
)

// waitingRoom is the API's waiting room with what runs it: the admitter
// and the release controller.
type waitingRoom struct {
	room  *waitingroom.Room
	rdb   *redis.Client
	close func()
}

// run admits queued buyers and adapts R until ctx is done.
func (w *waitingRoom) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.room.Run(gctx) })
	g.Go(func() error { return w.room.Controller().Run(gctx) })
	return g.Wait()
}

// WaitingRoomOpts are the parts of NewWaitingRoom a benchmark changes.
type WaitingRoomOpts struct {
	// Pending, when not nil, reads the consumers' backlog.
	Pending func(context.Context) (int64, error)
	// Thresholds override the controller's defaults.
	Thresholds waitingroom.Thresholds
	// PerUser overrides the per-buyer request limit (-1: none).
	PerUser int
	// RedisPrefix overrides the key prefix.
	RedisPrefix string
}

// NewWaitingRoom builds the waiting room on Redis when REDIS_URL is set,
// else in process, with a release controller reading the cell's signals:
// hold latency (fed by the hold handler), the pool's acquire waits, the
// outbox and live holds in PostgreSQL, and the consumers' backlog when
// opts.pending is set. Redis need not answer at start-up: the waiting room
// fails closed (503) until it does, and go-redis reconnects by itself.
func NewWaitingRoom(ctx context.Context, cfg Config, pool *pgxpool.Pool, logger *slog.Logger, reg prometheus.Registerer, opts WaitingRoomOpts) (*waitingRoom, error) {
	w := &waitingRoom{close: func() {}}
	var store waitingroom.Store = waitingroom.NewMemoryStore()
	if cfg.RedisURL != "" {
		ro, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			return nil, &configError{"REDIS_URL", "must be a redis:// or rediss:// URL"}
		}
		// Short timeouts: a waiting room that cannot reach Redis answers
		// 503 at once rather than holding requests.
		ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout, ro.PoolTimeout = time.Second, 500*time.Millisecond, 500*time.Millisecond, time.Second
		ro.PoolSize = max(ro.PoolSize, 64)
		redis.SetLogger(redisLogger{logger})
		w.rdb = redis.NewClient(ro)
		w.close = func() { _ = w.rdb.Close() }
		store = waitingroom.NewRedisStore(w.rdb, waitingroom.RedisStoreConfig{Prefix: opts.RedisPrefix})
		pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := w.rdb.Ping(pingCtx).Err(); err != nil {
			logger.WarnContext(ctx, "redis does not answer yet; the waiting room admits nobody until it does", "error", err.Error())
		}
	} else {
		logger.InfoContext(ctx, "REDIS_URL is unset: the waiting room is in-process, for this API process only")
	}
	holds := waitingroom.NewLatencyWindow(10 * time.Second)
	var room *waitingroom.Room
	controller := waitingroom.NewController(waitingroom.ControllerConfig{
		Signals:    waitingroom.NewCellSignals(pool, holds, opts.Pending),
		Thresholds: opts.Thresholds,
		Initial:    cfg.AdmissionRate,
		Max:        cfg.AdmissionRateMax,
		DemandFunc: func() bool { return room.HasDemand() },
		Logger:     logger,
		Registerer: reg,
	})
	room = waitingroom.NewRoom(waitingroom.RoomConfig{
		Store:       store,
		Signer:      cfg.admissionSigner(),
		Events:      catalog.New(pool),
		Onsales:     waitingroom.NewOnsales(pool),
		Controller:  controller,
		Limits:      waitingroom.Limits{PerIP: cfg.WaitingRoomIPLimit, PerUser: opts.PerUser},
		HoldLatency: holds,
		// Seat counts at most a second old, read once a second per event
		// for every join and admitter pass of this process.
		InventoryFunc: waitingroom.InventoryFrom(catalog.New(pool), time.Second),
		Logger:        logger,
		Registerer:    reg,
	})
	w.room = room
	return w, nil
}

// consumerPending is consumerPendingIn for the default namespace.
func consumerPending(js jetstream.JetStream) func(context.Context) (int64, error) {
	return consumerPendingIn(js, bus.Namespace{})
}

// consumerPendingIn returns the messages the durable consumers of ns's
// stream (the cell's purchase stream) have not acked (undelivered plus
// unacked); other cells' consumers do not count.
func consumerPendingIn(js jetstream.JetStream, ns bus.Namespace) func(context.Context) (int64, error) {
	stream := ns.Stream()
	return func(ctx context.Context) (int64, error) {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return 0, fmt.Errorf("stream %s: %w", stream, err)
		}
		var n int64
		l := s.ListConsumers(ctx)
		for ci := range l.Info() {
			n += int64(ci.NumPending) + int64(ci.NumAckPending)
		}
		if err := l.Err(); err != nil {
			return 0, fmt.Errorf("list consumers: %w", err)
		}
		return n, nil
	}
}

// redisLogger sends go-redis's own messages (failed dials while Redis is
// down) to the JSON log at warning level.
type redisLogger struct{ logger *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.logger.WarnContext(ctx, "redis client", "message", fmt.Sprintf(format, v...))
}
