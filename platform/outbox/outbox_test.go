package outbox_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/db"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// Insert writes the event's outbox_history row (what an order's timeline
// keeps once the relay deleted the outbox row) in the statement that
// writes the outbox row: one statement, no round trip of its own (the
// write goes with the transaction's COMMIT: one request in all here),
// and a rolled-back
// transaction keeps neither.
func TestInsertKeepsTheHistoryInTheSameStatement(t *testing.T) {
	t.Parallel()
	pool, costs := dbtest.NewTraced(t)
	orderID := uuid.New()
	env, _, err := outbox.NewOrderEvent(outbox.TypePaymentCaptured, orderID, time.Now(), "corr-1", "stripe:evt_1",
		outbox.PaymentCaptured{OrderID: orderID, PaymentIntentID: "pi_1", AmountReceived: 100, ProviderEventID: "evt_1"})
	require.NoError(t, err)
	env.AppliedBy = "purchase_saga"
	raw, err := json.Marshal(env)
	require.NoError(t, err)
	costs.Reset()
	ctx := db.WithRole(context.Background(), "insert")
	require.NoError(t, db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		return outbox.Insert(ctx, tx, env, raw)
	}))
	var found bool
	for _, c := range costs.Costs() {
		if c.Role == "insert" {
			found = true
			require.EqualValues(t, 1, c.Statements, "one statement writes the outbox row and its history")
			require.EqualValues(t, 1, c.RoundTrips, "the deferred insert goes with BEGIN and COMMIT in one request")
		}
	}
	require.True(t, found, "the tracer saw the insert")
	var got struct {
		eventType, causation, appliedBy string
		occurredAt                      time.Time
	}
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT event_type, causation_id, applied_by, occurred_at
		FROM outbox_history WHERE aggregate_id = $1 AND event_id = $2`, orderID, env.EventID).
		Scan(&got.eventType, &got.causation, &got.appliedBy, &got.occurredAt))
	require.Equal(t, outbox.TypePaymentCaptured, got.eventType)
	require.Equal(t, "stripe:evt_1", got.causation)
	require.Equal(t, "purchase_saga", got.appliedBy)
	require.WithinDuration(t, env.OccurredAt, got.occurredAt, time.Microsecond)

	rolledBack, raw2, err := outbox.NewOrderEvent(outbox.TypeOrderCanceled, orderID, time.Now(), "corr-1", "",
		outbox.OrderCanceled{OrderID: orderID, Reason: "buyer"})
	require.NoError(t, err)
	err = db.WithTx(context.Background(), pool, func(ctx context.Context, tx pgx.Tx) error {
		if err := outbox.Insert(ctx, tx, rolledBack, raw2); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT 1") // the queued row waits for the COMMIT, which never comes
		if err != nil {
			return err
		}
		return context.Canceled
	})
	require.ErrorIs(t, err, context.Canceled)
	require.EqualValues(t, 0, dbtest.Count(t, pool, "SELECT count(*) FROM outbox_history WHERE event_id = $1", rolledBack.EventID))
	require.EqualValues(t, 0, dbtest.Count(t, pool, "SELECT count(*) FROM outbox WHERE id = $1", rolledBack.EventID))
}

// The events a transaction writes go with its COMMIT as one statement,
// whatever ran between them: their outbox rows in the order written (seq
// too), each with its envelope and its history row, and "no causation"
// stored as NULL as OutboxInsert stores it.
func TestATransactionsEventsAreOneStatement(t *testing.T) {
	t.Parallel()
	pool, costs := dbtest.NewTraced(t)
	a, b := uuid.New(), uuid.New()
	type written struct {
		env outbox.Envelope
		raw []byte
	}
	var events []written
	for i, order := range []uuid.UUID{a, b, a, b} {
		causation := ""
		if i%2 == 0 {
			causation = "stripe:evt_" + order.String()
		}
		env, raw, err := outbox.NewOrderEvent(outbox.TypeOrderConfirmed, order, time.Now(), "corr", causation,
			outbox.OrderConfirmed{OrderID: order})
		require.NoError(t, err)
		events = append(events, written{env, raw})
	}
	costs.Reset()
	ctx := db.WithRole(context.Background(), "many")
	require.NoError(t, db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		for i, e := range events {
			if i == 2 {
				if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
					return err
				}
			}
			if err := outbox.Insert(ctx, tx, e.env, e.raw); err != nil {
				return err
			}
		}
		return nil
	}))
	for _, c := range costs.Costs() {
		if c.Role == "many" {
			require.EqualValues(t, 2, c.Statements, "SELECT 1, and one statement for the four events")
			require.EqualValues(t, 2, c.RoundTrips)
		}
	}
	rows, err := pool.Query(context.Background(), `SELECT o.id, o.envelope::text, h.causation_id
		FROM outbox o JOIN outbox_history h ON h.event_id = o.id AND h.aggregate_id = o.aggregate_id
		WHERE o.aggregate_id IN ($1, $2) ORDER BY o.seq`, a, b)
	require.NoError(t, err)
	type stored struct {
		id        uuid.UUID
		envelope  string
		causation *string
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stored, error) {
		var s stored
		return s, r.Scan(&s.id, &s.envelope, &s.causation)
	})
	require.NoError(t, err)
	require.Len(t, got, len(events))
	for i, e := range events {
		require.Equal(t, e.env.EventID, got[i].id, "row %d in the order written", i)
		require.JSONEq(t, string(e.raw), got[i].envelope)
		if e.env.CausationID == "" {
			require.Nil(t, got[i].causation)
		} else {
			require.Equal(t, e.env.CausationID, *got[i].causation)
		}
	}
}
