package tickets_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
	"boxoffice/domain/tickets"
	"boxoffice/platform/db"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

// capture applies PaymentCaptured to b's order, captured pending, through
// a saga that issues tickets with iss (purchase.SagaConfig.Tickets), as
// the Stripe ingress applies the capture webhook.
func (b *testBundle) capture(t *testing.T, iss *tickets.Issuer) error {
	t.Helper()
	env, _, err := outbox.NewOrderEvent(outbox.TypePaymentCaptured, b.hold.OrderID, time.Now(), "journey-1", "stripe:evt_1",
		outbox.PaymentCaptured{OrderID: b.hold.OrderID, PaymentIntentID: "pi_1", AmountReceived: 5000, ProviderEventID: "evt_1"})
	require.NoError(t, err)
	saga := purchase.NewSaga(purchase.SagaConfig{Tickets: iss})
	return db.WithTx(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) error {
		return saga.PaymentCaptured(ctx, tx, env)
	})
}

func (b *testBundle) capturePending(t *testing.T) {
	t.Helper()
	dbtest.Exec(t, b.pool, "UPDATE holds SET status = 'confirmed' WHERE id = $1", b.hold.HoldID)
	dbtest.Exec(t, b.pool, "UPDATE orders SET status = 'capture_pending' WHERE id = $1", b.hold.OrderID)
}

func (b *testBundle) outboxEnvelopes(t *testing.T, eventType string) []outbox.Envelope {
	t.Helper()
	return fixture.OutboxEnvelopes(t, b.pool, eventType)
}

// With the issuer given to the saga, a capture tickets its order in the
// transaction that marks it paid: the tickets are in, the hold's seats
// theirs, the order ticketed, TicketIssueRequested written applied by the
// tickets consumer (which acks it without a transaction) and TicketIssued
// caused by it, as when that consumer issues them. The same capture again
// is a duplicate.
func TestCaptureIssuesTheTicketsInItsTransaction(t *testing.T) {
	t.Parallel()
	iss, b := setup(t)
	b.capturePending(t)
	require.NoError(t, b.capture(t, iss))

	require.Equal(t, "ticketed", b.status(t))
	want := []uuid.UUID{tickets.ID(b.hold.OrderID, b.seats[0]), tickets.ID(b.hold.OrderID, b.seats[1])}
	require.EqualValues(t, 2, b.count(t, "SELECT count(*) FROM tickets WHERE order_id = $1 AND id = ANY($2)", b.hold.OrderID, want))
	require.EqualValues(t, 0, b.count(t, "SELECT count(*) FROM hold_seats WHERE hold_id = $1 AND released_at IS NULL", b.hold.HoldID),
		"the tickets own the seats now")

	requests := b.outboxEnvelopes(t, outbox.TypeTicketIssueRequested)
	require.Len(t, requests, 1)
	require.Equal(t, tickets.ConsumerName, requests[0].AppliedBy)
	issued := b.outboxEnvelopes(t, outbox.TypeTicketIssued)
	require.Len(t, issued, 1)
	require.Equal(t, requests[0].EventID.String(), issued[0].CausationID)
	require.Equal(t, "journey-1", issued[0].CorrelationID)
	var payload outbox.TicketIssued
	require.NoError(t, json.Unmarshal(issued[0].Payload, &payload))
	require.Equal(t, want, payload.TicketIDs)

	require.NoError(t, b.capture(t, iss), "a duplicate capture")
	require.Len(t, b.outboxEnvelopes(t, outbox.TypeTicketIssued), 1)
	require.EqualValues(t, 2, b.count(t, "SELECT count(*) FROM tickets WHERE order_id = $1", b.hold.OrderID))
}

// A capture whose tickets cannot be issued in its transaction (a seat
// ticketed to another order) writes nothing and says so with
// purchase.ErrTicketsNotIssued, for the caller to leave the capture to
// the saga's consumer, which requests the tickets as before.
func TestCaptureWhoseTicketsCannotBeIssuedWritesNothing(t *testing.T) {
	t.Parallel()
	iss, b := setup(t)
	b.capturePending(t)
	dbtest.Exec(t, b.pool, `INSERT INTO orders (id, user_id, event_id, status, amount_minor, currency, correlation_id)
		SELECT $1, gen_random_uuid(), event_id, 'ticketed', 0, currency, 'x' FROM orders LIMIT 1`, uuid.New())
	dbtest.Exec(t, b.pool, "INSERT INTO tickets (id, order_id, seat_id, event_id) SELECT gen_random_uuid(), id, $1, event_id FROM orders WHERE status = 'ticketed'", b.seats[1])

	err := b.capture(t, iss)
	require.ErrorIs(t, err, purchase.ErrTicketsNotIssued)
	require.ErrorIs(t, err, tickets.ErrSeatTicketed)
	require.Equal(t, "capture_pending", b.status(t))
	require.Empty(t, b.outboxEnvelopes(t, outbox.TypeTicketIssueRequested))
	require.EqualValues(t, 0, b.count(t, "SELECT count(*) FROM tickets WHERE order_id = $1", b.hold.OrderID))
}

// A seat conflict met first by the capture webhook, which leaves the order
// to the tickets consumer, is counted once: by the consumer's Issue.
func TestASeatConflictIsCountedOnceWhenTheCaptureFallsBack(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	reg := prometheus.NewRegistry()
	iss := tickets.NewIssuer(tickets.IssuerConfig{Signer: b.signer, Logger: slog.New(slog.DiscardHandler), Registerer: reg})
	conflicts := func() float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "boxoffice_ticket_seat_conflicts_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return 0
	}
	b.capturePending(t)
	dbtest.Exec(t, b.pool, `INSERT INTO orders (id, user_id, event_id, status, amount_minor, currency, correlation_id)
		SELECT $1, gen_random_uuid(), event_id, 'ticketed', 0, currency, 'x' FROM orders LIMIT 1`, uuid.New())
	dbtest.Exec(t, b.pool, "INSERT INTO tickets (id, order_id, seat_id, event_id) SELECT gen_random_uuid(), id, $1, event_id FROM orders WHERE status = 'ticketed'", b.seats[1])

	require.ErrorIs(t, b.capture(t, iss), tickets.ErrSeatTicketed)
	require.Zero(t, conflicts(), "the capture's attempt falls back to the consumer, which counts it")

	b.pay(t) // what the saga's consumer does with the capture the webhook left to it
	_, err := b.issue(t, iss)
	require.ErrorIs(t, err, tickets.ErrSeatTicketed)
	require.Equal(t, 1.0, conflicts())
}
