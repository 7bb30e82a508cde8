package purchase_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
	"boxoffice/sqlcgen"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

// hold_reserve's statements run their generic plan from a session's first
// call: the seat reads, whose array parameter made PostgreSQL's plan cache
// prefer a custom plan, were planned anew on every hold. auto_explain
// (nested statements, sent to the client as notices) shows each
// execution's plan; a generic plan names the seat ids as a parameter
// ("ANY ($2)"), a custom one as a literal array. The holds run on one
// session, so the plan cache is that session's.
func TestHoldReserveRunsGenericPlansFromTheFirstCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, plans := dbtest.NewSessionExplained(t)

	// Enough seats that a probe of seats_pkey is cheaper than a scan, so
	// the plan cache's choice is by the array's length, as in production.
	ev := fixture.NewEvent(t, pool, fixture.EventSpec{Rows: 40, SeatsPerRow: 50})
	dbtest.Exec(t, pool, "ANALYZE seats")
	svc := purchase.NewService(pool, slog.New(slog.NewTextHandler(io.Discard, nil)), purchase.Config{HoldTTL: time.Minute})
	plans.Reset()
	const holds = 7 // the plan cache tries custom plans for a statement's first five runs
	for i := range holds {
		_, err := svc.Hold(ctx, purchase.HoldParams{
			UserID: uuid.New(), EventID: ev.ID, SeatIDs: ev.Seats[2*i : 2*i+2], IdempotencyKey: fmt.Sprint("k", i),
		})
		require.NoError(t, err)
	}

	for _, stmt := range []string{
		"SELECT count(*), sum(locked.price_minor)",               // the seat lock
		"SELECT coalesce(array_agg(s.category_id) FILTER",        // the categories' limits
		"SELECT array_agg(t.seat_id ORDER BY t.seat_id)",         // the taken check
		"UPDATE hold_seats hs SET released_at = now()\n    FROM", // the reclaim
	} {
		ran := plans.Of(stmt)
		require.Len(t, ran, holds, "plans of %q", stmt)
		for i, p := range ran {
			require.Contains(t, p, "ANY ($2)", "hold %d ran a custom plan of %q:\n%s", i+1, stmt, p)
		}
	}
}

// The seat statements of an order's transactions take an array of holds;
// as hold_reserve's seat reads did, they were planned anew on every call.
// Each passes its array through a scalar subquery, so the plan cache
// settles on one generic plan after its five custom tries
// (pg_prepared_statements counts both on the session).
func TestHoldSeatStatementsSettleOnAGenericPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewSession(t)

	ev := fixture.NewEvent(t, pool, fixture.EventSpec{Rows: 40, SeatsPerRow: 50})
	svc := purchase.NewService(pool, slog.New(slog.NewTextHandler(io.Discard, nil)), purchase.Config{HoldTTL: time.Minute})
	var holds []uuid.UUID
	for i := range 200 {
		h, err := svc.Hold(ctx, purchase.HoldParams{
			UserID: uuid.New(), EventID: ev.ID, SeatIDs: ev.Seats[2*i : 2*i+2], IdempotencyKey: "k",
		})
		require.NoError(t, err)
		holds = append(holds, h.HoldID)
	}
	dbtest.Exec(t, pool, "ANALYZE")

	q := sqlcgen.New()
	for i := range 8 {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, q.HoldSeatLockSeats(ctx, tx, holds[i:i+1]))
		n, err := q.HoldSeatReleaseByHolds(ctx, tx, holds[i:i+1])
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
		require.NoError(t, tx.Rollback(ctx))
	}
	for _, name := range []string{"HoldSeatLockSeats", "HoldSeatReleaseByHolds"} {
		got := dbtest.PreparedPlans(t, pool, name)
		require.Equal(t, int64(5), got.Custom, "%s: custom plans", name)
		require.Equal(t, int64(3), got.Generic, "%s: generic plans", name)
	}
}

// One order's read is by key (OrderGetForUser over order_details): its
// generic plan probes the order's primary key, so the plan cache settles
// on it after its five custom tries. Read through the list's optional
// filters, whose generic plan cannot use the key it is given, the plan
// cache chose a custom plan for 150 to 400 of the 800 reads of a bench
// window, each planned anew.
func TestOrderReadSettlesOnAGenericPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewSession(t)

	ev := fixture.NewEvent(t, pool, fixture.EventSpec{})
	dbtest.Exec(t, pool, `WITH o AS (
			INSERT INTO orders (id, user_id, event_id, status, amount_minor, currency, correlation_id)
			SELECT gen_random_uuid(), gen_random_uuid(), $1, 'canceled', 1000, 'eur', 'c' FROM generate_series(1, 2000)
			RETURNING id)
		INSERT INTO holds (id, order_id, status, expires_at) SELECT gen_random_uuid(), id, 'expired', now() FROM o`, ev.ID)
	type owned struct{ id, buyer uuid.UUID }
	var orders []owned
	rows, err := pool.Query(ctx, "SELECT id, user_id FROM orders LIMIT 8")
	require.NoError(t, err)
	for rows.Next() {
		var o owned
		require.NoError(t, rows.Scan(&o.id, &o.buyer))
		orders = append(orders, o)
	}
	require.NoError(t, rows.Err())

	svc := purchase.NewService(pool, slog.New(slog.NewTextHandler(io.Discard, nil)), purchase.Config{})
	for _, o := range orders {
		got, err := svc.Order(ctx, o.buyer, o.id)
		require.NoError(t, err)
		require.Equal(t, o.id, got.ID)
	}
	_, err = svc.Order(ctx, uuid.New(), orders[0].id)
	require.ErrorIs(t, err, purchase.ErrOrderNotFound, "another buyer's order")

	got := dbtest.PreparedPlans(t, pool, "OrderGetForUser") // the one-order read
	require.Equal(t, int64(5), got.Custom, "custom plans")
	require.Equal(t, int64(4), got.Generic, "generic plans")

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
	require.NoError(t, err)
	var plan strings.Builder
	rows, err = conn.Query(ctx, fmt.Sprintf("EXPLAIN EXECUTE %s('%s'::uuid, '%s'::uuid)",
		pgx.Identifier{got.Name}.Sanitize(), orders[0].id, orders[0].buyer))
	require.NoError(t, err)
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan.WriteString(line + "\n")
	}
	require.NoError(t, rows.Err())
	require.Contains(t, plan.String(), "Index Scan using orders_pkey on orders", "the generic plan:\n%s", plan.String())
}
