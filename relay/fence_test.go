package relay_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/platform/db"
	"boxoffice/relay"
	"boxoffice/sqlcgen"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
)

// TestFencedRelayPublishesNothing: a relay of a failed-over region (its
// region epoch no longer current) cannot claim rows, so it publishes
// nothing; the relay of the region now serving publishes them all. The
// fenced relay is stopped once it has tried to claim and the database has
// refused it, which its log says.
func TestFencedRelayPublishesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	insertRows(t, b.pool, 10)
	_, err := sqlcgen.New().RegionEpochRaise(ctx, b.pool, 2)
	require.NoError(t, err)

	for _, epoch := range []int64{1, 2} {
		pool, err := db.NewPool(ctx, db.PoolConfig{URL: b.pool.Config().ConnString(), MaxConns: 4, RegionEpoch: epoch})
		require.NoError(t, err)
		defer pool.Close()
		nc, _ := b.nats.Connect(t)
		logs := testkit.NewLog(t, testkit.Level(slog.LevelInfo))
		r, err := relay.New(pool, nc, relay.Config{Logger: logs.Logger, IdleInterval: 10 * time.Millisecond})
		require.NoError(t, err)
		run := start(t, ctx, r)
		if epoch == 1 {
			logs.WaitForLine(t, 20*time.Second, "the fenced relay's claim to be refused", func(l testkit.Line) bool {
				e, _ := l["error"].(string)
				return l["msg"] == "claim outbox batch" && strings.Contains(e, "fenced")
			})
			require.NoError(t, run.stop())
			require.EqualValues(t, 10, unpublished(t, b.pool), "the fenced relay claimed or deleted rows")
			require.Zero(t, streamMsgs(t, b.js), "the fenced relay published")
			continue
		}
		require.Eventually(t, func() bool { return unpublished(t, b.pool) == 0 }, 20*time.Second, 20*time.Millisecond)
		require.NoError(t, run.stop())
		require.EqualValues(t, 10, streamMsgs(t, b.js))
	}
}

// TestStaleLeaseOfTheSameRelayIsReplaced: a relay whose settle failed
// leaves its lease to expire; when it later claims the same first row it
// replaces that stale lease instead of failing on it.
func TestStaleLeaseOfTheSameRelayIsReplaced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	insertRows(t, b.pool, 20)
	var first int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT min(seq) FROM outbox").Scan(&first))
	dbtest.Exec(t, b.pool, `INSERT INTO outbox_leases (relay_id, first_seq, last_seq, expires_at)
		VALUES ('relay-x', $1::bigint, $1::bigint + 4, now() - interval '1 minute')`, first)
	r, _ := b.newRelay(t, relay.Config{ID: "relay-x", BatchSize: 5})
	run := start(t, ctx, r)
	require.Eventually(t, func() bool { return unpublished(t, b.pool) == 0 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, run.stop())
	require.EqualValues(t, 20, streamMsgs(t, b.js))
}

// TestFencedRelaySettlesNothing: a relay that claimed a batch before its
// region was failed over cannot settle it: the one statement that would
// delete its acknowledged rows and end its lease is refused whole, so the
// rows stay in the outbox under the lease for the serving region's relay
// to take once it expires.
func TestFencedRelaySettlesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	insertRows(t, b.pool, 10)
	pool, err := db.NewPool(ctx, db.PoolConfig{URL: b.pool.Config().ConnString(), MaxConns: 2, RegionEpoch: 1})
	require.NoError(t, err)
	defer pool.Close()
	nc, _ := b.nats.Connect(t)
	logs := testkit.NewLog(t, testkit.Level(slog.LevelInfo))
	r, err := relay.New(pool, nc, relay.Config{Logger: logs.Logger})
	require.NoError(t, err)
	ids, first, err := relay.Claim(ctx, r, 10)
	require.NoError(t, err)
	require.Len(t, ids, 10)

	_, err = sqlcgen.New().RegionEpochRaise(ctx, b.pool, 2)
	require.NoError(t, err)
	require.Zero(t, relay.Settle(ctx, r, first, ids[:5], ids[5:8], time.Minute, ids[8:]))
	logs.WaitForLine(t, 10*time.Second, "the fenced settle to be refused", func(l testkit.Line) bool {
		e, _ := l["error"].(string)
		return l["msg"] == "settle outbox batch; its rows will be republished after their lease" && strings.Contains(e, "fenced")
	})
	require.EqualValues(t, 10, unpublished(t, b.pool), "the fenced settle deleted rows")
	require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE retry_at IS NOT NULL"), "the fenced settle released rows")
	require.EqualValues(t, 1, claimed(t, b.pool), "the fenced settle ended its lease")
}
