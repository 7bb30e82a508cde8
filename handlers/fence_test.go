package handlers_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/handlers"
	"boxoffice/platform/db"
	"boxoffice/sqlcgen"
	"boxoffice/testkit/dbtest"
)

// TestFencedRegionWritesNothing: after `boxoffice fence --epoch 2`, an API
// process still on epoch 1 answers every write with 503 fenced and changes
// nothing, while a process on epoch 2 writes.
func TestFencedRegionWritesNothing(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	ctx := context.Background()
	open := func(epoch int64) *pgxpool.Pool {
		pool, err := db.NewPool(ctx, db.PoolConfig{URL: url, MaxConns: 4, RegionEpoch: epoch})
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}
	operator := open(0)
	b := setupPool(t, open(1))

	// Before the failover: an event, a pending order and a paid one.
	org := b.organizer(t)
	ev := b.createEvent(t, org)
	_, buyer := b.buyer(t)
	adm := b.admit(t, buyer, ev.ID)
	pending := b.hold(t, buyer, adm, ev.ID, "k1", ev.Seats[0])
	require.Equal(t, http.StatusAccepted, pending.status, "%s", pending.body)
	pendingID := pending.json(t)["orderId"].(string)
	paid := b.hold(t, buyer, adm, ev.ID, "k2", ev.Seats[1])
	require.Equal(t, http.StatusAccepted, paid.status, "%s", paid.body)
	paidID := paid.json(t)["orderId"].(string)
	b.withPayment(t, paidID)
	b.setOrderStatus(t, paidID, "paid")

	epoch, err := sqlcgen.New().RegionEpochRaise(ctx, operator, 2)
	require.NoError(t, err)
	require.EqualValues(t, 2, epoch)
	before := rowCounts(t, operator)
	events := dbtest.Count(t, operator, "SELECT count(*) FROM events")

	for _, w := range []struct {
		name    string
		method  string
		path    string
		headers map[string]string
		body    any
	}{
		{"create event", http.MethodPost, "/v1/events", bearer(org), map[string]any{
			"name": "After failover", "startsAt": "2027-06-01T19:30:00Z", "currency": "eur",
			"sections": []map[string]any{{"name": "Floor", "rows": 1, "seatsPerRow": 2, "priceMinor": 5000}}}},
		{"hold", http.MethodPost, "/v1/events/" + ev.ID + "/holds", map[string]string{
			"Authorization": "Bearer " + buyer, "X-Admission-Token": adm, "Idempotency-Key": "k3"},
			map[string]any{"seatIds": []string{ev.Seats[2]}}},
		{"cancel", http.MethodPost, "/v1/orders/" + pendingID + "/cancel", bearer(buyer), nil},
		{"refund", http.MethodPost, "/v1/orders/" + paidID + "/refund", bearer(org), nil},
	} {
		res := b.do(t, w.method, w.path, w.headers, w.body)
		require.Equal(t, http.StatusServiceUnavailable, res.status, "%s: %s", w.name, res.body)
		require.Equal(t, handlers.TypeFenced, problemType(t, res), w.name)
	}
	webhook := b.stripeWebhook(t, stripeEvent("evt_fenced", "payment_intent.amount_capturable_updated", pendingID), webhookSecret)
	require.Equal(t, http.StatusServiceUnavailable, webhook.status, "Stripe retries the webhook later, against the region now serving")

	require.Equal(t, before, rowCounts(t, operator), "a fenced process wrote something")
	require.Equal(t, events, dbtest.Count(t, operator, "SELECT count(*) FROM events"))
	require.Zero(t, dbtest.Count(t, operator, "SELECT count(*) FROM stripe_events"))
	require.Contains(t, b.logs.String(), "region epoch is fenced")

	// The region now serving writes.
	current := setupPool(t, open(2))
	current.createEvent(t, current.organizer(t))
	res := current.do(t, http.MethodPost, "/v1/orders/"+pendingID+"/cancel", bearer(buyer), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
}
