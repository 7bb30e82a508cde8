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

// The waitlist consumer's plan: an event that frees seats of an event
// nobody waits for is acked with no transaction (ErrNoEffect); one of an
// event with a buyer waiting, and one naming an order that does not
// exist (which the handler dead-letters), go to the handler.
func TestWaitlistPlanSkipsEventsNobodyWaitsFor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	w, quiet, busy := quietAndBusy(t, b)
	quietHold, busyHold := quiet.hold, busy.hold

	expired := func(order uuid.UUID) outbox.Envelope {
		env, _, err := outbox.NewOrderEvent(outbox.TypeHoldExpired, order, time.Now(), "c", "", outbox.HoldExpired{})
		require.NoError(t, err)
		return env
	}
	released, _, err := outbox.NewEvent(outbox.AggregateEvent, outbox.TypeSeatsReleased, quiet.ID, time.Now(), "c", "",
		outbox.SeatsReleased{EventID: quiet.ID, SeatIDs: quiet.Seats})
	require.NoError(t, err)
	evs := []outbox.Envelope{expired(quietHold.OrderID), expired(busyHold.OrderID), released, expired(uuid.New())}
	plan, err := WaitlistPlan(w)(ctx, evs)
	require.NoError(t, err)
	require.Len(t, plan.Errs, len(evs))
	require.ErrorIs(t, plan.Errs[0], ErrNoEffect, "nobody waits for the quiet event")
	require.NoError(t, plan.Errs[1], "a buyer waits for the busy event")
	require.ErrorIs(t, plan.Errs[2], ErrNoEffect, "seats released in the quiet event")
	require.NoError(t, plan.Errs[3], "an unknown order is the handler's to refuse")
	require.NotNil(t, plan.ApplyFunc)
}

// The waitlist consumer running: a hold that expires in an event nobody
// waits for is acked with no inbox row; one in an event with a buyer
// waiting gets its seat offered, in an inbox transaction.
func TestWaitlistConsumerOffersOnlyWhereSomeoneWaits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	w, quiet, busy := quietAndBusy(t, b)
	quietHold, busyHold, entry := quiet.hold, busy.hold, busy.entry
	dbtest.Exec(t, b.pool, "UPDATE holds SET expires_at = now() - interval '1 second' WHERE id = ANY ($1)",
		[]uuid.UUID{quietHold.HoldID, busyHold.HoldID})

	c, err := NewWaitlist(b.pool, b.js, Config{Logger: b.logs.Logger, Registerer: b.reg, BackoffBase: time.Millisecond, BackoffMax: 50 * time.Millisecond}, w)
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	for _, h := range []purchase.Hold{quietHold, busyHold} {
		env, _, err := outbox.NewOrderEvent(outbox.TypeHoldExpired, h.OrderID, time.Now(), "c", "",
			outbox.HoldExpired{OrderID: h.OrderID, HoldID: h.HoldID, SeatIDs: []uuid.UUID{}})
		require.NoError(t, err)
		publishEvent(t, b.js, env, env.EventID.String())
	}
	waitForFanOut(t, 10*time.Second, "both expiries acked", func() bool {
		return b.metric(t, "boxoffice_consumer_acked_total", WaitlistName) == 2
	})
	got, err := w.Get(ctx, entry.UserID, entry.ID)
	require.NoError(t, err)
	require.Equal(t, waitlist.StateOffered, got.State)
	require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM inbox WHERE consumer = $1", WaitlistName),
		"the quiet event's expiry ran no transaction")
}

// waitlistEvent is an event of one seat, held, and the entry of the buyer
// waiting for it (none for a quiet event).
type waitlistEvent struct {
	fixture.Event
	hold  purchase.Hold
	entry waitlist.Entry
}

// quietAndBusy is the waitlist and two events of one held seat each: the
// quiet one nobody waits for, the busy one with a buyer waiting.
func quietAndBusy(t *testing.T, b *testBundle) (w *waitlist.Service, quiet, busy waitlistEvent) {
	t.Helper()
	w = waitlist.New(b.pool, purchase.NewService(b.pool, slog.New(slog.DiscardHandler), purchase.Config{}), waitlist.Config{})
	for i, e := range []*waitlistEvent{&quiet, &busy} {
		e.Event = fixture.NewEvent(t, b.pool, fixture.EventSpec{SeatsPerRow: 1})
		e.hold = fixture.Hold(t, b.pool, e.ID, "held", e.Seats[0])
		if i == 0 {
			continue
		}
		var category uuid.UUID
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT category_id FROM seats WHERE id = $1", e.Seats[0]).Scan(&category))
		var err error
		e.entry, err = w.Join(t.Context(), waitlist.JoinParams{UserID: uuid.New(), EventID: e.ID, CategoryID: category, Quantity: 1})
		require.NoError(t, err)
	}
	return w, quiet, busy
}
