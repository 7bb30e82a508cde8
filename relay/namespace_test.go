package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
	"boxoffice/relay"
)

// A relay of cell a publishes the outbox into a's stream, on a's subjects,
// and nothing into the default stream that shares the server.
func TestRelayPublishesIntoItsNamespace(t *testing.T) {
	t.Parallel()
	b := setup(t) // the default namespace is provisioned too
	ctx := t.Context()
	a := bus.ForCell("a")
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, bus.Provision(pctx, b.js, bus.Config{Namespace: a}))
	const n = 20
	insertRows(t, b.pool, n)

	r, _ := b.newRelay(t, relay.Config{Bus: a})
	start(t, ctx, r)
	require.Eventually(t, func() bool { return unpublished(t, b.pool) == 0 }, 30*time.Second, 10*time.Millisecond)

	s, err := b.js.Stream(pctx, a.Stream())
	require.NoError(t, err)
	info, err := s.Info(pctx, jetstream.WithSubjectFilter(">"))
	require.NoError(t, err)
	require.Equal(t, uint64(n), info.State.Msgs)
	require.Equal(t, map[string]uint64{"cells.a.ticketing.order.HoldCreated": n}, info.State.Subjects)
	require.Zero(t, streamMsgs(t, b.js), "the default stream gets nothing")
}
