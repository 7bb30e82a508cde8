package roles

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"boxoffice/platform/db"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

// `boxoffice failover stop` and `resume` as an operator runs them: each
// twice, the second changing nothing; a step without -epoch is a usage
// error (exit 2). The steps themselves are tested against a real standby
// in ops/failover.
func TestFailoverStopAndResumeCommands(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	env := func(name string) string { return map[string]string{"DATABASE_URL": url}[name] }
	ctx := context.Background()

	pool, err := db.NewPool(ctx, db.PoolConfig{URL: url, MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	fixture.NewEvent(t, pool, fixture.EventSpec{})

	var out bytes.Buffer
	require.NoError(t, runFailover(ctx, []string{"stop", "-epoch", "2"}, env, &out))
	require.Contains(t, out.String(), "onsales paused by this run: 1")
	require.Contains(t, out.String(), "region epoch 2 (was 1)")
	out.Reset()
	require.NoError(t, runFailover(ctx, []string{"stop", "-epoch", "2"}, env, &out))
	require.Contains(t, out.String(), "onsales paused by this run: 0")
	require.Contains(t, out.String(), "region epoch 2 (was 2)")

	out.Reset()
	require.NoError(t, runFailover(ctx, []string{"resume", "-epoch", "2"}, env, &out))
	require.Contains(t, out.String(), "onsales reopened: 1")
	out.Reset()
	require.NoError(t, runFailover(ctx, []string{"resume", "-epoch", "2"}, env, &out))
	require.Contains(t, out.String(), "onsales reopened: 0")

	require.Equal(t, 2, exitCode(runFailover(ctx, []string{"promote"}, env, &out)), "promote without -epoch")
	require.Equal(t, 2, exitCode(runFailover(ctx, []string{"rewind"}, env, &out)), "an unknown step")
	require.Equal(t, 2, exitCode(runFailover(ctx, []string{"stop", "-epoch", "1"}, env, &out)), "epoch 1 is never a new epoch")
}
