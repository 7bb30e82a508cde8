package roles

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
	"boxoffice/platform/db"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
	"boxoffice/testkit/natstest"
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

// `boxoffice failover mirror` gives a standby region its copy of the
// cell's streams: mirrors of the primary domain's streams, holding what
// the primary had and what it publishes next; run again, it changes
// nothing. Without -upstream-domain it is a usage error.
func TestFailoverMirrorCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, standby := natstest.NewRegions(t, bus.Config{})
	_, sjs := standby.Connect(t)
	// NewRegions mirrors already: start the standby without them.
	for _, name := range []string{bus.Stream, bus.DLQStream} {
		require.NoError(t, sjs.DeleteStream(ctx, name))
	}
	_, pjs := primary.Connect(t)
	_, err := pjs.Publish(ctx, bus.SubjectPrefix+"order.HoldCreated", []byte(`{}`))
	require.NoError(t, err)

	env := func(name string) string { return map[string]string{"NATS_URL": standby.URL}[name] }
	var out bytes.Buffer
	require.NoError(t, runFailover(ctx, []string{"mirror", "-upstream-domain", natstest.PrimaryDomain}, env, &out))
	require.Contains(t, out.String(), bus.Stream+": mirror of domain "+natstest.PrimaryDomain)
	require.Eventually(t, func() bool {
		s, err := sjs.Stream(ctx, bus.Stream)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		return err == nil && info.Config.Mirror != nil && info.State.Msgs == 1
	}, 30*time.Second, 50*time.Millisecond, "the mirror holds the primary's message")

	out.Reset()
	require.NoError(t, runFailover(ctx, []string{"mirror", "-upstream-domain", natstest.PrimaryDomain}, env, &out), "a second run")
	require.Contains(t, out.String(), bus.DLQStream+": mirror of domain "+natstest.PrimaryDomain)
	require.Equal(t, 2, exitCode(runFailover(ctx, []string{"mirror"}, env, &out)), "mirror without -upstream-domain")
}
