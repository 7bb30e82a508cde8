package consumers

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
	"boxoffice/platform/outbox"
)

// A consumer of cell a reads a's stream only: events of the default
// namespace and of cell b, on the same server and under the same subjects
// in default terms, never reach it, and its dead letters go to a's DLQ.
func TestConsumerReadsOnlyItsNamespace(t *testing.T) {
	t.Parallel()
	b := setup(t) // the default namespace is provisioned too
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	a, other := bus.ForCell("a"), bus.ForCell("b")
	for _, ns := range []bus.Namespace{a, other} {
		require.NoError(t, bus.Provision(ctx, b.js, bus.Config{Namespace: ns}))
	}
	publishIn := func(ns bus.Namespace, raw []byte, msgID string) uint64 {
		t.Helper()
		ack, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: ns.Subject("ticketing.order.TestEvent"), Data: raw}, jetstream.WithMsgID(msgID))
		require.NoError(t, err)
		require.Equal(t, ns.Stream(), ack.Stream)
		return ack.Sequence
	}

	var mu sync.Mutex
	var seen []uuid.UUID
	poison, poisonRaw := testEvent(t)
	c := b.newConsumer(t, Config{
		Bus:            a,
		FilterSubjects: []string{"ticketing.order.TestEvent", "ticketing.order.OtherEvent"},
	}, func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
		mu.Lock()
		seen = append(seen, ev.EventID)
		mu.Unlock()
		if ev.EventID == poison.EventID {
			return Permanent(errors.New("poison"))
		}
		return insertEffect(ctx, tx, ev)
	})

	// Events for the default namespace and for b, published first so that
	// a consumer on the wrong stream would meet them.
	var others []uuid.UUID
	for _, ns := range []bus.Namespace{{}, other} {
		ev, raw := testEvent(t)
		publishIn(ns, raw, ev.EventID.String())
		others = append(others, ev.EventID)
	}
	mine, mineRaw := testEvent(t)
	publishIn(a, mineRaw, mine.EventID.String())
	poisonSeq := publishIn(a, poisonRaw, poison.EventID.String())
	run(t, c)

	require.Eventually(t, func() bool {
		ictx, icancel := context.WithTimeout(ctx, time.Second)
		defer icancel()
		cons, err := b.js.Consumer(ictx, a.Stream(), "test")
		if err != nil {
			return false
		}
		info := cons.CachedInfo()
		return info.AckFloor.Stream >= poisonSeq && info.NumAckPending == 0 && info.NumPending == 0
	}, waitFor, 10*time.Millisecond)

	cons, err := b.js.Consumer(ctx, a.Stream(), "test")
	require.NoError(t, err)
	require.Equal(t, []string{"cells.a.ticketing.order.TestEvent", "cells.a.ticketing.order.OtherEvent"},
		cons.CachedInfo().Config.FilterSubjects, "filters are mapped into the namespace")
	for _, ns := range []bus.Namespace{{}, other} {
		_, err := b.js.Consumer(ctx, ns.Stream(), "test")
		require.ErrorIs(t, err, jetstream.ErrConsumerNotFound, ns.Stream())
	}

	mu.Lock()
	require.ElementsMatch(t, []uuid.UUID{mine.EventID, poison.EventID}, seen)
	for _, id := range others {
		require.False(t, slices.Contains(seen, id), "an event of another namespace reached the consumer")
	}
	mu.Unlock()
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, mine.EventID))

	msgs := func(stream string) uint64 {
		s, err := b.js.Stream(ctx, stream)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}
	require.Equal(t, uint64(1), msgs(a.DLQStream()))
	require.Zero(t, msgs(bus.DLQStream))
	require.Zero(t, msgs(other.DLQStream()))
	dlq, err := b.js.Stream(ctx, a.DLQStream())
	require.NoError(t, err)
	dl, err := dlq.GetLastMsgForSubject(ctx, ">")
	require.NoError(t, err)
	require.Equal(t, "cells.a.dlq.ticketing.test", dl.Subject)
	require.Equal(t, poisonRaw, dl.Data)
	require.Equal(t, "cells.a.ticketing.order.TestEvent", dl.Header.Get(HeaderOriginalSubject))
	require.Equal(t, poison.EventID.String(), dl.Header.Get(HeaderEventID))
}
