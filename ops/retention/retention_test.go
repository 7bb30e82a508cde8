package retention_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/ops/retention"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// A pass deletes what is past its retention and nothing younger, in
// batches until the backlog is gone; clears the client secrets nobody can
// use any more; and a second pass finds nothing.
func TestPassKeepsTablesBounded(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	now := time.Now()

	// 2,500 inbox rows 40 days old (more than two batches) and 10 from
	// today; Stripe ids 40 days old and from today.
	dbtest.Exec(t, pool, `INSERT INTO inbox (consumer, event_id, processed_at)
		SELECT 'c', gen_random_uuid(), now() - interval '40 days' FROM generate_series(1, 2500)`)
	dbtest.Exec(t, pool, `INSERT INTO inbox (consumer, event_id) SELECT 'c', gen_random_uuid() FROM generate_series(1, 10)`)
	// Event history: 3 rows 40 days old, 2 from today.
	dbtest.Exec(t, pool, `INSERT INTO outbox_history (aggregate_id, event_id, event_type, occurred_at)
		SELECT gen_random_uuid(), gen_random_uuid(), 'HoldCreated', now() - interval '40 days' FROM generate_series(1, 3)`)
	dbtest.Exec(t, pool, `INSERT INTO outbox_history (aggregate_id, event_id, event_type, occurred_at)
		SELECT gen_random_uuid(), gen_random_uuid(), 'HoldCreated', now() FROM generate_series(1, 2)`)
	dbtest.Exec(t, pool, `INSERT INTO stripe_events (id, type, received_at) VALUES
		('evt_old', 'payment_intent.succeeded', now() - interval '40 days'), ('evt_new', 'payment_intent.succeeded', now())`)

	// Two orders: one paid, whose secret nobody needs; one pending, whose
	// buyer still confirms with it. The pending one's key has expired.
	ev := fixture.NewEvent(t, pool, fixture.EventSpec{SeatsPerRow: 2})
	paid := fixture.Hold(t, pool, ev.ID, "paid", ev.Seats[0])
	pending := fixture.Hold(t, pool, ev.ID, "pending", ev.Seats[1])
	fixture.MarkPaid(t, pool, paid)
	for _, o := range []uuid.UUID{paid.OrderID, pending.OrderID} {
		dbtest.Exec(t, pool, `INSERT INTO payments (order_id, provider, payment_intent_id, client_secret, status, amount_minor, currency)
			VALUES ($1, 'sandbox', $2, 'pi_secret', 'requires_payment_method', 1000, 'eur')`, o, "pi_"+strings.ReplaceAll(o.String(), "-", ""))
	}
	dbtest.Exec(t, pool, "UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE order_id = $1", pending.OrderID)

	p, err := retention.New(pool, retention.Config{})
	require.NoError(t, err)
	got, err := p.Pass(ctx, now)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"inbox": 2500, "outbox_history": 3, "stripe_events": 1, "idempotency_keys": 1, "idempotent_requests": 0, "client_secrets": 1}, got)
	require.EqualValues(t, 10, dbtest.Count(t, pool, "SELECT count(*) FROM inbox"))
	// The two holds' events (four rows of hold_reserve) and the two of today.
	require.EqualValues(t, 6, dbtest.Count(t, pool, "SELECT count(*) FROM outbox_history"))
	require.EqualValues(t, 1, dbtest.Count(t, pool, "SELECT count(*) FROM stripe_events WHERE id = 'evt_new'"))
	require.EqualValues(t, 1, dbtest.Count(t, pool, "SELECT count(*) FROM idempotency_keys"), "the paid order's key has not expired")
	require.EqualValues(t, 1, dbtest.Count(t, pool, "SELECT count(*) FROM payments WHERE client_secret IS NOT NULL AND order_id = $1", pending.OrderID),
		"the order awaiting payment keeps its secret")

	got, err = p.Pass(ctx, now)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"inbox": 0, "outbox_history": 0, "stripe_events": 0, "idempotency_keys": 0, "idempotent_requests": 0, "client_secrets": 0}, got)
}

// A retention shorter than the window that depends on it is refused.
func TestRetentionsOutlastTheirWindows(t *testing.T) {
	t.Parallel()
	_, err := retention.New(nil, retention.Config{Inbox: 7 * 24 * time.Hour})
	require.ErrorContains(t, err, "inbox")
	_, err = retention.New(nil, retention.Config{StripeEvents: time.Hour})
	require.ErrorContains(t, err, "Stripe")
}
