package webhooks

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/sqlcgen"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

// The fan-out's read of a batch's orders takes their ids as an array,
// which made PostgreSQL's plan cache plan it anew for every batch (a
// custom plan for the ids given always looked cheaper than a generic one
// for ten). It passes the array through a scalar subquery, so the plan
// cache settles on one generic plan after its five custom tries
// (pg_prepared_statements counts both on the session).
func TestFanOutSubjectsSettleOnAGenericPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewSession(t)

	ev := fixture.NewEvent(t, pool, fixture.EventSpec{})
	dbtest.Exec(t, pool, `INSERT INTO orders (id, user_id, event_id, status, amount_minor, currency, correlation_id)
		SELECT gen_random_uuid(), gen_random_uuid(), $1, 'ticketed', 1000, 'eur', 'c' FROM generate_series(1, 2000)`, ev.ID)
	dbtest.Exec(t, pool, "ANALYZE orders")
	var ids []uuid.UUID
	rows, err := pool.Query(ctx, "SELECT id FROM orders LIMIT 16")
	require.NoError(t, err)
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())

	q := sqlcgen.New()
	for i := range 8 {
		got, err := q.WebhookFanOutSubjects(ctx, pool, ids[2*i:2*i+2])
		require.NoError(t, err)
		require.Len(t, got, 2)
	}
	got := dbtest.PreparedPlans(t, pool, "WebhookFanOutSubjects")
	require.Equal(t, int64(5), got.Custom, "custom plans")
	require.Equal(t, int64(3), got.Generic, "generic plans")
}
