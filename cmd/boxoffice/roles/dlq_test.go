package roles

import (
	"context"
	"flag"
	"testing"

	"github.com/stretchr/testify/require"

	"boxoffice/ops/dlq"
	"boxoffice/testkit"
	"boxoffice/testkit/natstest"
)

// `boxoffice dlq` lists an empty dead-letter stream with its header, says
// which sequence holds no dead letter, insists on who and why, and takes
// -h as help. The workflow itself is ops/dlq's test.
func TestDLQCommand(t *testing.T) {
	t.Parallel()
	srv := natstest.New(t)
	env := func(name string) string {
		return map[string]string{"NATS_URL": srv.URL, "BOXOFFICE_LOG_LEVEL": "error"}[name]
	}
	ctx := context.Background()
	out := &testkit.Buffer{}
	require.NoError(t, runDLQ(ctx, []string{"list"}, env, out))
	require.Contains(t, out.String(), "SEQ")
	require.ErrorIs(t, runDLQ(ctx, []string{"show", "7"}, env, out), dlq.ErrNotFound)
	require.ErrorIs(t, runDLQ(ctx, []string{"replay", "-by", "ops", "-why", "test", "7"}, env, out), dlq.ErrNotFound)
	require.ErrorContains(t, runDLQ(ctx, []string{"discard", "7"}, env, out), "who asks")
	require.ErrorIs(t, runDLQ(ctx, []string{"list", "-h"}, env, out), flag.ErrHelp)
	require.Error(t, runDLQ(ctx, nil, env, out))
}
