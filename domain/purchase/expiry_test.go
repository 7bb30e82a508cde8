package purchase_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/dbtest"
)

// runExpirers runs n expirers configured by cfg until the returned stop is
// called; stop fails the test unless each Run returned nil.
func runExpirers(t *testing.T, b *sagaBundle, n int, cfg purchase.ExpirerConfig) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, n)
	for range n {
		e := purchase.NewExpirer(b.pool, cfg)
		go func() { errs <- e.Run(ctx) }()
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			for range n {
				select {
				case err := <-errs:
					require.NoError(t, err)
				case <-time.After(30 * time.Second):
					require.FailNow(t, "expirer did not stop")
				}
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// gathered returns the value of a counter, or the sample count of a
// histogram, registered on reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if h := m.GetHistogram(); h != nil {
			return float64(h.GetSampleCount())
		}
		return m.GetCounter().GetValue()
	}
	require.FailNow(t, "metric not registered", name)
	return 0
}

func TestExpirer(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentExpirersExpireEachHoldOnce", func(t *testing.T) {
		t.Parallel()
		const expiring, confirmed, live = 2000, 20, 20
		b := newSagaBundle(t, 42, 50)

		orders := make([]uuid.UUID, expiring+confirmed+live)
		errs := make([]error, len(orders))
		var wg sync.WaitGroup
		next := make(chan int)
		for range 16 {
			wg.Go(func() {
				for i := range next {
					var h purchase.Hold
					h, errs[i] = b.tryHold()
					orders[i] = h.OrderID
				}
			})
		}
		for i := range orders {
			next <- i
		}
		close(next)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		expiringOrders, confirmedOrders, liveOrders := orders[:expiring], orders[expiring:expiring+confirmed], orders[expiring+confirmed:]

		// Every third expiring order has a PaymentIntent; one more has a
		// payment row without one yet.
		var withIntent []uuid.UUID
		for i := 0; i < expiring; i += 3 {
			withIntent = append(withIntent, expiringOrders[i])
		}
		dbtest.Exec(t, b.pool, `INSERT INTO payments (order_id, provider, payment_intent_id, client_secret, status, amount_minor, currency)
			SELECT id, 'sandbox', 'pi_' || replace(id::text, '-', ''), $2, 'requires_payment_method', amount_minor, currency
			FROM orders WHERE id = ANY($1)`, withIntent, secretMarker)
		dbtest.Exec(t, b.pool, `INSERT INTO payments (order_id, provider, status, amount_minor, currency)
			SELECT id, 'sandbox', 'creating', amount_minor, currency FROM orders WHERE id = $1`, expiringOrders[1])
		dbtest.Exec(t, b.pool, "UPDATE holds SET expires_at = now() - random() * interval '10 minutes' - interval '1 millisecond' WHERE order_id = ANY($1)", expiringOrders)
		dbtest.Exec(t, b.pool, "UPDATE holds SET status = 'confirmed', expires_at = now() - interval '1 hour' WHERE order_id = ANY($1)", confirmedOrders)
		dbtest.Exec(t, b.pool, "UPDATE orders SET status = 'capture_pending' WHERE id = ANY($1)", confirmedOrders)

		reg := prometheus.NewRegistry()
		stop := runExpirers(t, b, 4, purchase.ExpirerConfig{BatchSize: 100, Interval: 10 * time.Millisecond, Logger: b.logs.Logger, Registerer: reg})
		require.Eventually(t, func() bool {
			return dbtest.Count(t, b.pool, "SELECT count(*) FROM holds WHERE status = 'active' AND expires_at < now()") == 0
		}, time.Minute, 10*time.Millisecond)
		stop()

		require.Equal(t, int64(expiring), dbtest.Count(t, b.pool, "SELECT count(*) FROM holds WHERE status = 'expired' AND order_id = ANY($1)", expiringOrders))
		require.Equal(t, int64(expiring), dbtest.Count(t, b.pool, "SELECT count(*) FROM orders WHERE status = 'failed' AND version = 1 AND id = ANY($1)", expiringOrders))
		require.Zero(t, dbtest.Count(t, b.pool, `SELECT count(*) FROM hold_seats hs JOIN holds h ON h.id = hs.hold_id
			WHERE hs.released_at IS NULL AND h.order_id = ANY($1)`, expiringOrders))

		// One HoldExpired per hold, with its seats.
		require.Equal(t, int64(expiring), dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE event_type = 'HoldExpired'"))
		require.Equal(t, int64(expiring), dbtest.Count(t, b.pool, `SELECT count(DISTINCT envelope->'payload'->>'hold_id') FROM outbox
			WHERE event_type = 'HoldExpired' AND json_array_length(envelope->'payload'->'seat_ids') = 1`))
		// One cancel per order with an intent, naming that intent and
		// caused by the order's HoldExpired.
		require.Equal(t, int64(len(withIntent)), dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE event_type = 'AuthorizationCancelRequested'"))
		require.Equal(t, int64(len(withIntent)), dbtest.Count(t, b.pool, `
			SELECT count(DISTINCT c.aggregate_id) FROM outbox c
			JOIN payments p ON p.order_id = c.aggregate_id
			JOIN outbox e ON e.aggregate_id = c.aggregate_id AND e.event_type = 'HoldExpired'
			WHERE c.event_type = 'AuthorizationCancelRequested'
			  AND c.envelope->'payload'->>'payment_intent_id' = p.payment_intent_id
			  AND c.envelope->'payload'->>'reason' = 'hold_expired'
			  AND c.envelope->>'causation_id' = e.id::text
			  AND c.aggregate_id = ANY($1)`, withIntent))
		require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE envelope::text LIKE '%TOPSECRET%'"))

		// Confirmed holds past their expiry, and holds not yet expired, are
		// never touched.
		for _, id := range confirmedOrders {
			require.Equal(t, state{order: "capture_pending", hold: "confirmed", owned: 1}, b.state(t, id))
		}
		for _, id := range liveOrders {
			require.Equal(t, state{order: "pending_payment", hold: "active", owned: 1}, b.state(t, id))
		}
		require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE event_type IN ('HoldExpired', 'AuthorizationCancelRequested') AND NOT aggregate_id = ANY($1)", expiringOrders))

		require.Equal(t, float64(expiring), gathered(t, reg, "boxoffice_holds_expired_total"))
		require.Equal(t, float64(expiring), gathered(t, reg, "boxoffice_expiry_delay_seconds"))
	})

	t.Run("CatchesUpInFullBatchesWithoutWaiting", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 40)
		var orders []uuid.UUID
		for range 35 {
			orders = append(orders, b.hold(t).OrderID)
		}
		dbtest.Exec(t, b.pool, "UPDATE holds SET expires_at = now() - interval '1 hour' WHERE order_id = ANY($1)", orders)

		one := purchase.NewExpirer(b.pool, purchase.ExpirerConfig{BatchSize: 10})
		n, err := one.ExpireBatch(context.Background())
		require.NoError(t, err)
		require.Equal(t, 10, n)

		// With an hour between sweeps, only back-to-back full batches can
		// expire the other 25 in time.
		runExpirers(t, b, 1, purchase.ExpirerConfig{BatchSize: 10, Interval: time.Hour})
		require.Eventually(t, func() bool {
			return dbtest.Count(t, b.pool, "SELECT count(*) FROM holds WHERE status = 'expired'") == 35
		}, 20*time.Second, 10*time.Millisecond)
	})

	t.Run("ReclaimedSeatsStayWithTheNewerHold", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		old := b.hold(t, b.seats[0], b.seats[1])
		b.expire(t, old.OrderID)
		// The hold path reclaims seat 0 under its lock and leaves the old
		// hold active.
		newer := b.hold(t, b.seats[0])
		require.Equal(t, state{order: "pending_payment", hold: "active", owned: 1}, b.state(t, old.OrderID))

		n, err := b.expirer.ExpireBatch(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, state{order: "failed", hold: "expired", version: 1, owned: 0}, b.state(t, old.OrderID))
		require.Equal(t, state{order: "pending_payment", hold: "active", owned: 1}, b.state(t, newer.OrderID))

		expired := b.events(t, old.OrderID, outbox.TypeHoldExpired)
		require.Len(t, expired, 1)
		var p outbox.HoldExpired
		require.NoError(t, json.Unmarshal(expired[0].Payload, &p))
		require.Equal(t, old.HoldID, p.HoldID)
		require.ElementsMatch(t, []uuid.UUID{b.seats[0], b.seats[1]}, p.SeatIDs)
		// Seat 1 is free; seat 0 is the newer hold's.
		b.hold(t, b.seats[1])
		_, err = b.svc.Hold(context.Background(), purchase.HoldParams{
			UserID: uuid.New(), EventID: b.eventID, SeatIDs: []uuid.UUID{b.seats[0]}, IdempotencyKey: "k",
		})
		var unavailable *purchase.SeatUnavailableError
		require.ErrorAs(t, err, &unavailable)
	})
}
