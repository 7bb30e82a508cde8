// Package orderfeed tells an API process's order event streams when their
// order changed, so that a stream reads its order when something happened
// to it instead of every few hundred milliseconds.
//
// A Feed follows one purchase cell's order events on the bus with an
// ordered JetStream consumer (no durable state, each process its own) and
// wakes the watchers of the event's order. A wake-up carries no status:
// the watcher reads the order row, the one place every change lands, so
// the feed can never show a status the database does not have. Every
// order status change commits an order event to the outbox in its own
// transaction, and the relay publishes it after the commit, so a wake-up
// comes after the change is readable.
//
// Guarantees:
//   - While Healthy, every order event published to the cell's stream
//     after Run started wakes the watchers of its order, in stream order,
//     once the ordered consumer has it.
//   - When the feed stops being healthy (the connection to NATS is lost,
//     the consumer cannot be created or keeps failing) and when it becomes
//     healthy again, every watcher is woken, so that it reads its order
//     and, while the feed is not healthy, falls back to reading on its
//     own schedule. A watcher is never left waiting on a feed that cannot
//     tell it anything.
package orderfeed

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"boxoffice/bus"
)

// Config configures a Feed.
type Config struct {
	// JetStream is the connection to the cell's bus. Required.
	JetStream jetstream.JetStream
	// Bus is the cell's namespace. Defaults to the default cell's.
	Bus bus.Namespace
	// Logger logs the feed's failures. Required.
	Logger *slog.Logger
	// CheckInterval is how often the feed checks its connection and
	// consumer. Defaults to 1s.
	CheckInterval time.Duration
}

// Feed wakes the watchers of each order when an event about the order is
// published. Its zero value is not usable: use New.
type Feed struct {
	cfg    Config
	logger *slog.Logger

	mu       sync.Mutex
	watchers map[uuid.UUID]map[*watcher]struct{}
	all      map[*watcher]struct{}
	healthy  bool
}

type watcher struct {
	order uuid.UUID
	wake  chan struct{}
}

// New returns a feed for cfg; Run makes it follow the bus.
func New(cfg Config) *Feed {
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = time.Second
	}
	return &Feed{
		cfg: cfg, logger: cfg.Logger.With("component", "orderfeed", "cell", cfg.Bus.Cell()),
		watchers: map[uuid.UUID]map[*watcher]struct{}{}, all: map[*watcher]struct{}{},
	}
}

// Watch returns a channel that receives a value when order may have
// changed or the feed's health changed, and a function that stops the
// watch. Wake-ups that come while one is pending are merged into it.
func (f *Feed) Watch(order uuid.UUID) (<-chan struct{}, func()) {
	w := &watcher{order: order, wake: make(chan struct{}, 1)}
	f.mu.Lock()
	if f.watchers[order] == nil {
		f.watchers[order] = map[*watcher]struct{}{}
	}
	f.watchers[order][w] = struct{}{}
	f.all[w] = struct{}{}
	f.mu.Unlock()
	return w.wake, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.all, w)
		if ws := f.watchers[order]; ws != nil {
			delete(ws, w)
			if len(ws) == 0 {
				delete(f.watchers, order)
			}
		}
	}
}

// Healthy reports whether the feed follows the bus now: while it does
// not, watchers must read on their own schedule.
func (f *Feed) Healthy() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.healthy
}

// Watching is how many watches are open.
func (f *Feed) Watching() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.all)
}

func (f *Feed) setHealthy(healthy bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.healthy == healthy {
		return
	}
	f.healthy = healthy
	f.wakeAllLocked()
}

func notify(w *watcher) {
	select {
	case w.wake <- struct{}{}:
	default: // one is pending: it covers this one
	}
}

// wakeOrder wakes the watchers of order.
func (f *Feed) wakeOrder(order uuid.UUID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.watchers[order] {
		notify(w)
	}
}

// Run follows the cell's order events until ctx is done. It never fails
// for a bus that is down: it reports unhealthy and tries again.
func (f *Feed) Run(ctx context.Context) error {
	defer f.setHealthy(false)
	check := time.NewTicker(f.cfg.CheckInterval)
	defer check.Stop()
	var cc jetstream.ConsumeContext
	defer func() {
		if cc != nil {
			cc.Stop()
		}
	}()
	failed := make(chan struct{}, 1)
	warned := false // one warning per outage, not one a second
	for {
		connected := f.cfg.JetStream.Conn().Status() == nats.CONNECTED
		if cc == nil && connected {
			var err error
			if cc, err = f.consume(ctx, failed); err != nil {
				if ctx.Err() == nil && !warned {
					f.logger.WarnContext(ctx, "order feed cannot follow the bus; streams read on their own", "error", err.Error())
					warned = true
				}
				cc = nil
			} else if warned {
				f.logger.InfoContext(ctx, "order feed follows the bus again")
				warned = false
			}
		}
		f.setHealthy(cc != nil && connected)
		select {
		case <-ctx.Done():
			return nil
		case <-failed:
			if cc != nil {
				cc.Stop()
				cc = nil
			}
			f.setHealthy(false)
		case <-check.C:
		}
	}
}

// consume starts an ordered consumer of the cell's order events from now
// on. A consumer error that the ordered consumer does not recover from by
// itself is sent on failed.
func (f *Feed) consume(ctx context.Context, failed chan<- struct{}) (jetstream.ConsumeContext, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cons, err := f.cfg.JetStream.OrderedConsumer(cctx, f.cfg.Bus.Stream(), jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{f.cfg.Bus.Subject(bus.SubjectPrefix + "order.>")},
		DeliverPolicy:     jetstream.DeliverNewPolicy,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, err
	}
	return cons.Consume(func(msg jetstream.Msg) {
		var env struct {
			AggregateID uuid.UUID `json:"aggregate_id"`
		}
		if err := json.Unmarshal(msg.Data(), &env); err == nil && env.AggregateID != uuid.Nil {
			f.wakeOrder(env.AggregateID)
		}
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		f.logger.WarnContext(ctx, "order feed consumer error", "error", err.Error())
		if errors.Is(err, jetstream.ErrOrderedConsumerReset) {
			// It recreates itself from the last message it delivered; what
			// happened meanwhile is read by every watcher now.
			f.wakeAll()
		}
		if isFatal(err) {
			select {
			case failed <- struct{}{}:
			default:
			}
		}
	}))
}

// isFatal reports whether a consume error ends the ordered consumer's
// delivery until it is created again (the others it recovers from).
func isFatal(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound)
}

func (f *Feed) wakeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wakeAllLocked()
}

// wakeAllLocked wakes every watcher; with f.mu held.
func (f *Feed) wakeAllLocked() {
	for w := range f.all {
		notify(w)
	}
}
