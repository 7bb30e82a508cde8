package relay_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"boxoffice/relay"
)

// Claims made at once by many relays, each a single statement, never
// lease one row twice: they take turns on the advisory lock, and each
// reads the leases the claims before it committed. Together they lease
// every row.
func TestConcurrentClaimsNeverShareARow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const n = 2000
	insertRows(t, b.pool, n)

	var mu sync.Mutex
	seen := map[uuid.UUID]int{}
	g, gctx := errgroup.WithContext(ctx)
	for range 8 {
		r, _ := b.newRelay(t, relay.Config{})
		g.Go(func() error {
			for {
				ids, _, err := relay.Claim(gctx, r, 7)
				if err != nil || len(ids) == 0 {
					return err
				}
				mu.Lock()
				for _, id := range ids {
					seen[id]++
				}
				mu.Unlock()
			}
		})
	}
	require.NoError(t, g.Wait())
	require.Len(t, seen, n, "every row leased")
	for id, count := range seen {
		require.Equal(t, 1, count, "row %s leased %d times", id, count)
	}
	require.EqualValues(t, n, unpublished(t, b.pool), "a claim deletes nothing")
}

// The claim and the settle commit without waiting for their WAL, and only
// they: the setting ends with their transaction, so nothing else the
// session runs afterwards is relaxed.
func TestClaimAndSettleRelaxOnlyTheirOwnCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	insertRows(t, b.pool, 3)
	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	setting := func() string {
		t.Helper()
		var s string
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&s))
		return s
	}
	if setting() == "off" {
		// A private test cluster (pgcluster Fast) turns it off server-wide.
		t.Skip("the server runs with synchronous_commit off: nothing to relax")
	}
	for _, call := range []string{
		"SELECT count(*) FROM outbox_claim('relay-x', 10, '30 seconds', false, 0)",
		"SELECT count(*) FROM outbox_settle('relay-x', (SELECT min(seq) FROM outbox), (SELECT array_agg(seq) FROM outbox), '{}', '0', '{}', '0')",
	} {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, call)
		require.NoError(t, err)
		var inside string
		require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&inside))
		require.Equal(t, "off", inside, "%s: relaxed until its transaction ends", call)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, "on", setting(), "%s: and not after", call)
	}
	require.Zero(t, unpublished(t, b.pool))
	require.Zero(t, claimed(t, b.pool))
}

// A row committed late with a seq below the relay's floor (the first seq
// its last scan from the head found) is still published: the relay starts
// a claim from the true head every so often. Without that, the floor would
// hide the row for ever.
func TestRowCommittedLateBelowTheFloorIsPublished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	late, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer late.Rollback(ctx) //nolint:errcheck // committed below
	_, err = late.Exec(ctx, `INSERT INTO outbox (id, subject, event_type, aggregate_id, envelope)
		VALUES (gen_random_uuid(), 'ticketing.order.HoldCreated', 'HoldCreated', gen_random_uuid(), '{}')`)
	require.NoError(t, err)
	insertRows(t, b.pool, 3) // higher seqs, committed first

	r, _ := b.newRelay(t, relay.Config{})
	run := start(t, ctx, r)
	require.Eventually(t, func() bool { return streamMsgs(t, b.js) == 3 }, 30*time.Second, 10*time.Millisecond)
	// Found by a scan from the head at the tail of the outbox, these raise
	// the relay's floor above the late row.
	insertRows(t, b.pool, 3)
	require.Eventually(t, func() bool { return streamMsgs(t, b.js) == 6 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, late.Commit(ctx))
	require.Eventually(t, func() bool { return streamMsgs(t, b.js) == 7 }, 30*time.Second, 10*time.Millisecond,
		"the late row below the floor is published")
	require.Eventually(t, func() bool { return unpublished(t, b.pool) == 0 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, run.stop())
}
