package relay_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/db"
	"boxoffice/relay"
	"boxoffice/testkit/dbtest"
)

// A claim, whichever way it finds its rows, the settle of a batch and the
// end of a lease are each one round trip to PostgreSQL: one statement that
// is its own transaction, not a transaction of several statements.
func TestClaimAndSettleAreOneRoundTripEach(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	insertRows(t, b.pool, 10)
	costs := db.NewCostTracer()
	pool, err := db.NewPool(ctx, db.PoolConfig{URL: b.pool.Config().ConnString(), MaxConns: 2, Tracer: costs})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	nc, _ := b.nats.Connect(t)
	r, err := relay.New(pool, nc, relay.Config{Logger: testLogger(t)})
	require.NoError(t, err)

	// Claims 0 and 1 fill their batch above the highest live lease; claim
	// 2 finds 2 rows there and, short, scans again from the head; claim 3,
	// at the tail, starts from the head and finds nothing.
	var batches [][]uuid.UUID
	var firsts []int64
	for i, want := range []int{4, 4, 2, 0} {
		ids, first, err := relay.Claim(db.WithRole(ctx, fmt.Sprint("claim ", i)), r, 4)
		require.NoError(t, err)
		require.Len(t, ids, want, "claim %d", i)
		batches, firsts = append(batches, ids), append(firsts, first)
	}
	require.EqualValues(t, 3, claimed(t, b.pool))

	settle0 := db.WithRole(ctx, "settle 0")
	require.EqualValues(t, 2, relay.Settle(settle0, r, firsts[0], batches[0][:2], batches[0][2:3], time.Minute, batches[0][3:]))
	require.EqualValues(t, 4, relay.Settle(db.WithRole(ctx, "settle 1"), r, firsts[1], batches[1], nil, 0, nil))
	relay.EndLease(db.WithRole(ctx, "end lease 2"), r, firsts[2])

	got := map[string]db.Cost{}
	for _, c := range costs.Costs() {
		if c.Role == "other" { // the pool's ping
			continue
		}
		c.StatementTime = 0 // the clock's; the counts are exact
		got[c.Role] = c.Cost
	}
	oneStatement := db.Cost{Transactions: 1, WriteTransactions: 1, Statements: 1, RoundTrips: 1}
	require.Equal(t, map[string]db.Cost{
		"claim 0": oneStatement, "claim 1": oneStatement, "claim 2": oneStatement, "claim 3": oneStatement,
		"settle 0": oneStatement, "settle 1": oneStatement, "end lease 2": oneStatement,
	}, got)

	require.Zero(t, claimed(t, b.pool), "every lease ended")
	require.EqualValues(t, 4, unpublished(t, b.pool), "the acknowledged rows are deleted")
	require.EqualValues(t, 1, dbtest.Count(t, b.pool,
		"SELECT count(*) FROM outbox WHERE id = $1 AND retry_at > now() + interval '50 seconds'", batches[0][2]),
		"the failed row waits out its backoff")
	require.EqualValues(t, 1, dbtest.Count(t, b.pool,
		"SELECT count(*) FROM outbox WHERE id = $1 AND retry_at > now() AND retry_at <= now() + interval '10 seconds'", batches[0][3]),
		"the rejected row waits the longest backoff")
	ids, _, err := relay.Claim(ctx, r, 4)
	require.NoError(t, err)
	require.Equal(t, batches[2], ids, "the rows of an ended lease are claimable at once")
}

// A running relay opens no transaction of several statements: every round
// trip it makes to PostgreSQL while draining the outbox — claims, settles,
// idle polls, stats — is a statement that commits on its own.
func TestRunningRelayMakesOneRoundTripPerTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const n = 2000
	insertRows(t, b.pool, n)
	costs := db.NewCostTracer()
	pool, err := db.NewPool(ctx, db.PoolConfig{URL: b.pool.Config().ConnString(), MaxConns: 4, Tracer: costs})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	nc, _ := b.nats.Connect(t)
	r, err := relay.New(pool, nc, relay.Config{BatchSize: 100, Logger: testLogger(t)})
	require.NoError(t, err)

	run := start(t, db.WithRole(ctx, "relay"), r)
	require.Eventually(t, func() bool { return unpublished(t, b.pool) == 0 }, time.Minute, 10*time.Millisecond)
	require.NoError(t, run.stop())
	requireEachRowOnceInStream(t, b, n)

	var cost db.Cost
	for _, c := range costs.Costs() {
		if c.Role == "relay" {
			cost = c.Cost
		}
	}
	require.GreaterOrEqual(t, cost.RoundTrips, int64(2*n/100), "a claim and a settle per batch at least")
	require.Equal(t, cost.RoundTrips, cost.Transactions, "every round trip a whole transaction")
	require.Equal(t, cost.Statements, cost.Transactions, "every statement a whole transaction")
}
