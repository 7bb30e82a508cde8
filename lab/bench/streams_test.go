package bench_test

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/lab/bench"
	"boxoffice/testkit/dbtest"
)

// The proxy counts every transaction its clients end, whether a statement
// outside a transaction or a committed or rolled back one, and a
// statement's preparation, but not the connections' startups.
func TestTxCounterCountsTransactions(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewURL(t)
	cfg, err := pgx.ParseConfig(dbURL)
	require.NoError(t, err)
	txc, err := bench.NewTxCounter(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	require.NoError(t, err)
	t.Cleanup(func() { _ = txc.Close() })
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.Host = txc.Addr()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&n))
	// The startup is not counted; the first use of a statement is two:
	// pgx prepares it (one round trip that ends outside a transaction) and
	// runs it.
	require.EqualValues(t, 2, txc.Transactions())
	base := txc.Transactions()
	for range 3 {
		require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&n))
	}
	for _, commit := range []bool{true, false} {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		for range 2 {
			_, err = tx.Exec(ctx, "SELECT 1")
			require.NoError(t, err)
		}
		if commit {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
	}
	require.EqualValues(t, 5, txc.Transactions()-base, "three statements, one commit, one rollback")
}
