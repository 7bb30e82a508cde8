package payments_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79/webhook"

	"boxoffice/domain/payments"
	"boxoffice/domain/purchase"
	"boxoffice/domain/tickets"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// capturedOrder is an order of two seats whose capture is pending, and an
// ingress that issues tickets where the capture webhook lands.
type capturedOrder struct {
	pool    *pgxpool.Pool
	ingress *payments.Ingress
	hold    purchase.Hold
	seats   []uuid.UUID
}

const ticketsWebhookSecret = "whsec_test_tickets"

func newCapturedOrder(t *testing.T) capturedOrder {
	t.Helper()
	pool := dbtest.New(t)
	ev := fixture.NewEvent(t, pool, fixture.EventSpec{Name: "t", StartsAt: time.Now().Add(time.Hour), SeatsPerRow: 4})
	seats := ev.SeatsByID()[:2]
	h := fixture.Hold(t, pool, ev.ID, "journey-1", seats...)
	dbtest.Exec(t, pool, "UPDATE holds SET status = 'confirmed' WHERE id = $1", h.HoldID)
	dbtest.Exec(t, pool, "UPDATE orders SET status = 'capture_pending' WHERE id = $1", h.OrderID)
	signer, err := tickets.NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Seed())
	require.NoError(t, err)
	logger := slog.New(slog.DiscardHandler)
	in := payments.NewIngress(pool, payments.IngressConfig{
		WebhookSecret: ticketsWebhookSecret, Logger: logger,
		Tickets: tickets.NewIssuer(tickets.IssuerConfig{Signer: signer, Logger: logger}),
	})
	return capturedOrder{pool: pool, ingress: in, hold: h, seats: seats}
}

// receiveCapture delivers the provider's payment_intent.succeeded for the
// order, signed.
func (c capturedOrder) receiveCapture(t *testing.T) payments.Received {
	t.Helper()
	payload := fmt.Appendf(nil, `{"id":"evt_capture_1","object":"event","type":"payment_intent.succeeded","created":%d,"livemode":false,`+
		`"api_version":"2024-06-20","data":{"object":{"id":"pi_1","object":"payment_intent","status":"succeeded","amount":5000,`+
		`"amount_received":5000,"currency":"eur","metadata":{"order_id":"%s"}}}}`, time.Now().Unix(), c.hold.OrderID)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: ticketsWebhookSecret, Timestamp: time.Now()})
	r, err := c.ingress.Receive(context.Background(), signed.Payload, signed.Header)
	require.NoError(t, err)
	return r
}

func (c capturedOrder) status(t *testing.T) string {
	t.Helper()
	var s string
	require.NoError(t, c.pool.QueryRow(context.Background(), "SELECT status FROM orders WHERE id = $1", c.hold.OrderID).Scan(&s))
	return s
}

func (c capturedOrder) events(t *testing.T, eventType string) []outbox.Envelope {
	t.Helper()
	return fixture.OutboxEnvelopes(t, c.pool, eventType)
}

// The capture webhook tickets its order in the transaction that records
// it: the capture and the ticket request are both written applied, so
// neither the saga's consumer nor the tickets consumer has a transaction
// to run for this purchase.
func TestCaptureWebhookTicketsTheOrder(t *testing.T) {
	t.Parallel()
	c := newCapturedOrder(t)
	r := c.receiveCapture(t)
	require.True(t, r.Applied)
	require.Equal(t, outbox.TypePaymentCaptured, r.DomainEvent)

	require.Equal(t, "ticketed", c.status(t))
	require.EqualValues(t, 2, dbtest.Count(t, c.pool, "SELECT count(*) FROM tickets WHERE order_id = $1", c.hold.OrderID))
	captured := c.events(t, outbox.TypePaymentCaptured)
	require.Len(t, captured, 1)
	require.Equal(t, purchase.SagaConsumer, captured[0].AppliedBy)
	requests := c.events(t, outbox.TypeTicketIssueRequested)
	require.Len(t, requests, 1)
	require.Equal(t, tickets.ConsumerName, requests[0].AppliedBy)
	require.Len(t, c.events(t, outbox.TypeTicketIssued), 1)
}

// A capture whose tickets cannot be issued where it lands (a seat
// ticketed to another order, which needs a person) is still recorded, for
// the saga's consumer: the order stays capture_pending here, and that
// consumer's step marks it paid and asks the tickets consumer, which
// dead-letters the request as before. Nothing of the failed attempt is
// left.
func TestCaptureWebhookLeavesTicketsItCannotIssueToTheConsumers(t *testing.T) {
	t.Parallel()
	c := newCapturedOrder(t)
	dbtest.Exec(t, c.pool, `INSERT INTO orders (id, user_id, event_id, status, amount_minor, currency, correlation_id)
		SELECT $1, gen_random_uuid(), event_id, 'ticketed', 0, currency, 'x' FROM orders LIMIT 1`, uuid.New())
	dbtest.Exec(t, c.pool, "INSERT INTO tickets (id, order_id, seat_id, event_id) SELECT gen_random_uuid(), id, $1, event_id FROM orders WHERE status = 'ticketed'", c.seats[0])

	r := c.receiveCapture(t)
	require.False(t, r.Applied)
	require.False(t, r.Duplicate)
	require.Equal(t, outbox.TypePaymentCaptured, r.DomainEvent)

	require.Equal(t, "capture_pending", c.status(t))
	captured := c.events(t, outbox.TypePaymentCaptured)
	require.Len(t, captured, 1)
	require.Empty(t, captured[0].AppliedBy, "left to the saga's consumer")
	require.Empty(t, c.events(t, outbox.TypeTicketIssueRequested))
	require.EqualValues(t, 0, dbtest.Count(t, c.pool, "SELECT count(*) FROM tickets WHERE order_id = $1", c.hold.OrderID))
	require.EqualValues(t, 1, dbtest.Count(t, c.pool, "SELECT count(*) FROM stripe_events WHERE id = 'evt_capture_1'"))
}
