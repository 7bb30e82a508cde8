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

// A settle's delete runs its generic plan from a session's first call: a
// relay below saturation settles batches of one or two rows, for which
// PostgreSQL's plan cache preferred a custom plan over a generic one
// costed for ten, and planned the delete on every settle. auto_explain's
// plans show a generic plan naming the ids as a parameter. The settle
// still commits asynchronously (its synchronous_commit outlives the
// function's own SET clause).
func TestSettleRunsGenericPlansFromTheFirstCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, plans := dbtest.NewSessionExplained(t)

	const settles = 7 // the plan cache tries custom plans for a statement's first five runs
	var seqs []int64
	for range settles {
		orderID := uuid.New()
		env, _, err := outbox.NewOrderEvent(outbox.TypeTicketIssued, orderID, time.Now(), "corr", "",
			outbox.TicketIssued{OrderID: orderID})
		require.NoError(t, err)
		raw, err := json.Marshal(env)
		require.NoError(t, err)
		require.NoError(t, db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
			return outbox.Insert(ctx, tx, env, raw)
		}))
		var seq int64
		require.NoError(t, pool.QueryRow(ctx, "SELECT seq FROM outbox WHERE id = $1", env.EventID).Scan(&seq))
		seqs = append(seqs, seq)
	}
	plans.Reset()
	for _, seq := range seqs {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		lat, err := outbox.Settle(ctx, tx, outbox.SettleParams{RelayID: "r", LeaseFirst: 1, Acked: []int64{seq}})
		require.NoError(t, err)
		require.Len(t, lat, 1, "the acknowledged row is deleted")
		var syncCommit string
		require.NoError(t, tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&syncCommit))
		require.Equal(t, "off", syncCommit, "the settle's transaction commits asynchronously")
		require.NoError(t, tx.Commit(ctx))
	}

	ran := plans.Of("DELETE FROM outbox o WHERE o.seq = ANY (p_acked)")
	require.Len(t, ran, settles, "plans of the settle's delete")
	for i, p := range ran {
		require.Contains(t, p, "ANY ($3)", "settle %d ran a custom plan:\n%s", i+1, p)
	}
}
