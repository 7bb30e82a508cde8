package consumers

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
	"boxoffice/domain/tickets"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/fixture"
)

// ticketsBundle is a consumer test bundle with an order of two seats and
// the key its tickets are signed with.
type ticketsBundle struct {
	*testBundle
	signer  *tickets.Signer
	orderID uuid.UUID
	holdID  uuid.UUID
	seats   []uuid.UUID
}

func setupTickets(t *testing.T) *ticketsBundle {
	t.Helper()
	b := &ticketsBundle{testBundle: setup(t)}
	ev := fixture.NewEvent(t, b.pool, fixture.EventSpec{Name: "t", StartsAt: time.Now(), SeatsPerRow: 4})
	b.seats = ev.SeatsByID()[:2]
	h := fixture.Hold(t, b.pool, ev.ID, "journey-1", b.seats...)
	b.orderID, b.holdID = h.OrderID, h.HoldID
	seed, err := tickets.GenerateSeed()
	require.NoError(t, err)
	b.signer, err = tickets.NewSigner(seed)
	require.NoError(t, err)
	return b
}

func (b *ticketsBundle) pay(t *testing.T) {
	t.Helper()
	fixture.MarkPaid(t, b.pool, purchase.Hold{OrderID: b.orderID, HoldID: b.holdID})
}

func (b *ticketsBundle) consumer(t *testing.T) *Consumer {
	t.Helper()
	logger := slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := NewTickets(b.pool, b.js, Config{
		Logger: logger, Registerer: b.reg, BackoffBase: time.Millisecond, BackoffMax: 50 * time.Millisecond, MaxDeliver: 1000,
	}, tickets.NewIssuer(tickets.IssuerConfig{Signer: b.signer, Logger: logger}))
	require.NoError(t, err)
	require.Equal(t, TicketsName, c.Name())
	return c
}

// issueRequest is a TicketIssueRequested for the bundle's order, as the
// saga writes it.
func (b *ticketsBundle) issueRequest(t *testing.T) (outbox.Envelope, []byte) {
	t.Helper()
	env, raw, err := outbox.NewOrderEvent(outbox.TypeTicketIssueRequested, b.orderID, time.Now(), "journey-1", uuid.NewString(),
		outbox.TicketIssueRequested{OrderID: b.orderID, HoldID: b.holdID, SeatIDs: b.seats})
	require.NoError(t, err)
	return env, raw
}

// publishAs stores the event on its own subject under msgID, which the
// relay sets to the event id; another msgID stands for a republish after
// the stream's duplicate window.
func (b *ticketsBundle) publishAs(t *testing.T, msgID string, env outbox.Envelope, raw []byte) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ack, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: env.Subject(), Data: raw}, jetstream.WithMsgID(msgID))
	require.NoError(t, err)
	require.False(t, ack.Duplicate)
	return ack.Sequence
}

func (b *ticketsBundle) requireTicketedOnce(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	var status string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT status FROM orders WHERE id = $1", b.orderID).Scan(&status))
	require.Equal(t, "ticketed", status)
	rows, err := b.pool.Query(ctx, "SELECT id, seat_id, qr_payload FROM tickets WHERE order_id = $1 ORDER BY seat_id", b.orderID)
	require.NoError(t, err)
	type row struct {
		ID, SeatID uuid.UUID
		QRPayload  string
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	require.Len(t, got, len(b.seats), "one ticket per seat")
	for i, r := range got {
		require.Equal(t, b.seats[i], r.SeatID)
		require.Equal(t, tickets.ID(b.orderID, r.SeatID), r.ID, "ticket ids are UUIDv5(order, seat)")
		tk, err := tickets.Verify(b.signer.PublicKey(), r.QRPayload)
		require.NoError(t, err)
		require.Equal(t, r.ID, tk.ID)
		require.Equal(t, b.orderID, tk.OrderID)
	}
	require.EqualValues(t, 0, b.count(t, "SELECT count(*) FROM hold_seats WHERE hold_id = $1 AND released_at IS NULL", b.holdID))
	require.EqualValues(t, 1, b.count(t, "SELECT count(*) FROM outbox WHERE event_type = 'TicketIssued' AND aggregate_id = $1", b.orderID))
}

func TestTicketsConsumer(t *testing.T) {
	t.Parallel()

	t.Run("RedeliveredAndRepeatedRequestsIssueOneTicketPerSeat", func(t *testing.T) {
		t.Parallel()
		b := setupTickets(t)
		b.pay(t)
		first, firstRaw := b.issueRequest(t)
		second, secondRaw := b.issueRequest(t)
		b.publishAs(t, first.EventID.String(), first, firstRaw)
		b.publishAs(t, "republished-"+first.EventID.String(), first, firstRaw) // same event again
		last := b.publishAs(t, second.EventID.String(), second, secondRaw)     // another request, same order
		run(t, b.consumer(t))
		b.waitSettled(t, TicketsName, last)

		b.requireTicketedOnce(t)
		require.EqualValues(t, 2, b.count(t, "SELECT count(*) FROM inbox WHERE consumer = $1", TicketsName),
			"the republished event is applied once")
		require.Empty(t, b.deadLetters(t))
	})

	t.Run("UnpaidOrderIsRetriedUntilPaid", func(t *testing.T) {
		t.Parallel()
		b := setupTickets(t)
		env, raw := b.issueRequest(t)
		seq := b.publishAs(t, env.EventID.String(), env, raw)
		run(t, b.consumer(t))
		require.Eventually(t, func() bool {
			return b.metric(t, "boxoffice_consumer_redelivered_total", TicketsName) >= 2
		}, waitFor, 5*time.Millisecond, "the request is nakked and comes back while the order is unpaid")
		require.EqualValues(t, 0, b.count(t, "SELECT count(*) FROM tickets"))
		require.EqualValues(t, 0, b.count(t, "SELECT count(*) FROM inbox WHERE consumer = $1", TicketsName))

		b.pay(t)
		b.waitSettled(t, TicketsName, seq)
		b.requireTicketedOnce(t)
		require.Empty(t, b.deadLetters(t))
	})

	t.Run("UndecodablePayloadIsDeadLettered", func(t *testing.T) {
		t.Parallel()
		b := setupTickets(t)
		env, raw, err := outbox.NewOrderEvent(outbox.TypeTicketIssueRequested, b.orderID, time.Now(), "journey-1", "",
			map[string]any{"order_id": 42})
		require.NoError(t, err)
		b.publishAs(t, env.EventID.String(), env, raw)
		run(t, b.consumer(t))
		dls := b.waitDeadLetters(t, 1)
		require.Equal(t, TicketsName, dls[0].Header.Get(HeaderConsumer))
		require.EqualValues(t, 0, b.count(t, "SELECT count(*) FROM tickets"))
	})
}
