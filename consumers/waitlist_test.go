package consumers

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
	"boxoffice/domain/waitlist"
	"boxoffice/platform/db"
	"boxoffice/platform/inbox"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

// The waitlist consumer's handler: a PaymentFailed waits for the purchase
// saga (the seats are not free before it applied the decline), then the
// returned seat is offered; a payload that does not decode is permanent.
func TestWaitlistHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	ev := fixture.NewEvent(t, b.pool, fixture.EventSpec{SeatsPerRow: 1})
	h := fixture.Hold(t, b.pool, ev.ID, "declined", ev.Seats[0])
	var category uuid.UUID
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT category_id FROM seats WHERE id = $1", ev.Seats[0]).Scan(&category))
	w := waitlist.New(b.pool, purchase.NewService(b.pool, slog.New(slog.DiscardHandler), purchase.Config{}), waitlist.Config{})
	entry, err := w.Join(ctx, waitlist.JoinParams{UserID: uuid.New(), EventID: ev.ID, CategoryID: category, Quantity: 1})
	require.NoError(t, err)

	handle := WaitlistHandler(w)
	run := func(env outbox.Envelope) error {
		return db.WithTx(ctx, b.pool, func(ctx context.Context, tx pgx.Tx) error { return handle(ctx, tx, env) })
	}
	failed, _, err := outbox.NewOrderEvent(outbox.TypePaymentFailed, h.OrderID, time.Now(), "c", "",
		outbox.PaymentFailed{OrderID: h.OrderID, PaymentIntentID: "pi_1", Code: "card_declined"})
	require.NoError(t, err)
	err = run(failed)
	require.ErrorIs(t, err, errSagaFirst, "not before the saga applied it")
	require.NotErrorIs(t, err, ErrPermanent)

	// The saga applies the decline: the order fails, its seat is free.
	require.NoError(t, db.WithTx(ctx, b.pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := inbox.Record(ctx, tx, purchase.SagaConsumer, []uuid.UUID{failed.EventID})
		return err
	}))
	dbtest.Exec(t, b.pool, "UPDATE hold_seats SET released_at = now() WHERE hold_id = $1", h.HoldID)
	dbtest.Exec(t, b.pool, "UPDATE holds SET status = 'released' WHERE id = $1", h.HoldID)
	require.NoError(t, run(failed))
	require.NoError(t, run(failed), "a redelivery offers nothing more")
	got, err := w.Get(ctx, entry.UserID, entry.ID)
	require.NoError(t, err)
	require.Equal(t, waitlist.StateOffered, got.State)
	require.Equal(t, []uuid.UUID{ev.Seats[0]}, got.OfferedSeats)
	require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE event_type = 'WaitlistOffered'"))

	bad := outbox.Envelope{EventID: uuid.New(), EventType: outbox.TypeSeatsReleased, Payload: json.RawMessage(`[]`)}
	require.ErrorIs(t, run(bad), ErrPermanent)
	unknown, _, err := outbox.NewOrderEvent(outbox.TypeHoldExpired, uuid.New(), time.Now(), "c", "", outbox.HoldExpired{})
	require.NoError(t, err)
	require.ErrorIs(t, run(unknown), ErrPermanent, "an order that does not exist")
}
