package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
	"boxoffice/testkit/natstest"
)

// The standby region's copy of a cell's streams is JetStream's own mirror:
// what the primary held reaches it at the same sequences, it refuses the
// roles' provisioning until promoted, and after the primary is lost the
// promotion makes it the cell's writable stream with every copied message.
func TestStandbyMirrorsAndPromotes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cfg := bus.Config{Namespace: bus.ForCell("eu-1")}
	ns := cfg.Namespace
	primary, standby := natstest.NewRegions(t, cfg)
	_, pjs := primary.Connect(t)
	_, sjs := standby.Connect(t)

	const n = 20
	for i := range n {
		msg := nats.NewMsg(ns.Subject(fmt.Sprintf("ticketing.order.created.%d", i)))
		msg.Data = []byte("x")
		_, err := pjs.PublishMsg(ctx, msg, jetstream.WithMsgID(fmt.Sprintf("evt-%d", i)))
		require.NoError(t, err)
	}
	dead := nats.NewMsg(ns.Subject("dlq.ticketing.consumer-a"))
	_, err := pjs.PublishMsg(ctx, dead)
	require.NoError(t, err)

	waitCopied(t, sjs, ns, n, 1)
	copies, err := bus.StandbyCopies(ctx, sjs, ns)
	require.NoError(t, err)
	require.Equal(t, []bus.StreamCopy{
		{Stream: ns.Stream(), Mirror: true, LastSeq: n, Active: copies[0].Active},
		{Stream: ns.DLQStream(), Mirror: true, LastSeq: 1, Active: copies[1].Active},
	}, copies)

	// A role started in the standby before the failover waits.
	require.ErrorIs(t, bus.Provision(ctx, sjs, cfg), bus.ErrStandbyStream)
	_, err = sjs.Publish(ctx, ns.Subject("ticketing.order.created.x"), nil)
	require.Error(t, err, "a mirror takes no publishes")
	require.NoError(t, bus.ProvisionStandby(ctx, sjs, cfg, natstest.PrimaryDomain), "twice is a no-op")

	primary.Stop()
	promoted, err := bus.PromoteStandby(ctx, sjs, cfg)
	require.NoError(t, err)
	require.Equal(t, []string{ns.Stream(), ns.DLQStream()}, promoted)
	promoted, err = bus.PromoteStandby(ctx, sjs, cfg)
	require.NoError(t, err)
	require.Empty(t, promoted, "a second promotion promotes nothing")
	require.NoError(t, bus.Provision(ctx, sjs, cfg), "the roles provision the promoted streams")

	s, err := sjs.Stream(ctx, ns.Stream())
	require.NoError(t, err)
	info := s.CachedInfo()
	require.Nil(t, info.Config.Mirror)
	require.Equal(t, []string{ns.SubjectPrefix() + ">"}, info.Config.Subjects)
	require.Equal(t, uint64(n), info.State.Msgs, "every copied message kept")
	first, err := s.GetMsg(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "evt-0", first.Header.Get(jetstream.MsgIDHeader))

	// The standby's relay publishes after the copied messages. A row the
	// primary's relay had published is published again (its outbox row
	// was not yet deleted in the replica): it lands once more, at a new
	// sequence, and the consumers' inboxes absorb it.
	ack, err := sjs.PublishMsg(ctx, &nats.Msg{Subject: ns.Subject("ticketing.order.created.new")}, jetstream.WithMsgID("evt-new"))
	require.NoError(t, err)
	require.Equal(t, uint64(n+1), ack.Sequence)
	ack, err = sjs.PublishMsg(ctx, &nats.Msg{Subject: ns.Subject("ticketing.order.created.0")}, jetstream.WithMsgID("evt-0"))
	require.NoError(t, err)
	require.False(t, ack.Duplicate, "the mirror's copies carry no deduplication state")
	require.Equal(t, uint64(n+2), ack.Sequence)

	// The old primary comes back: what it publishes stays in its own
	// stream, and the promoted stream pulls nothing from it.
	primary.Start(t)
	_, pjs = primary.Connect(t)
	ack, err = pjs.PublishMsg(ctx, &nats.Msg{Subject: ns.Subject("ticketing.order.created.old")}, jetstream.WithMsgID("evt-old"))
	require.NoError(t, err)
	require.Equal(t, uint64(n+1), ack.Sequence, "stored by the old primary's own stream")
	require.Equal(t, natstest.PrimaryDomain, ack.Domain)
	ack, err = sjs.PublishMsg(ctx, &nats.Msg{Subject: ns.Subject("ticketing.order.created.next")}, jetstream.WithMsgID("evt-next"))
	require.NoError(t, err)
	require.Equal(t, natstest.StandbyDomain, ack.Domain)
	require.Equal(t, uint64(n+3), ack.Sequence, "the old primary's publish did not reach the standby's stream")
}

// waitCopied waits until the standby's copies hold events and dead
// letters messages.
func waitCopied(t *testing.T, js jetstream.JetStream, ns bus.Namespace, events, dead uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		copies, err := bus.StandbyCopies(context.Background(), js, ns)
		if err == nil && copies[0].LastSeq == events && copies[1].LastSeq == dead {
			return
		}
		require.True(t, time.Now().Before(deadline), "standby copy not caught up in 30s: %+v %v", copies, err)
		time.Sleep(20 * time.Millisecond)
	}
}
