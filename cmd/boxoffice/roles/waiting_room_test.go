package roles

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
	"boxoffice/testkit/natstest"
)

// The release controller's consumer-pending signal counts what the durable
// consumers of the purchase stream have not acked.
func TestConsumerPending(t *testing.T) {
	t.Parallel()
	srv := natstest.New(t)
	_, js := srv.Connect(t)
	ctx := t.Context()
	pending := consumerPending(js)
	n, err := pending(ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	for _, name := range []string{"a", "b"} {
		_, err := js.CreateOrUpdateConsumer(ctx, bus.Stream, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy})
		require.NoError(t, err)
	}
	for range 3 {
		_, err := js.Publish(ctx, bus.SubjectPrefix+"order.Test", []byte("{}"))
		require.NoError(t, err)
	}
	// The server counts a consumer's pending messages as the stream hands
	// them over, a moment after the publish is acknowledged.
	require.Eventually(t, func() bool {
		n, err := pending(ctx)
		return err == nil && n == 6
	}, 5*time.Second, 10*time.Millisecond, "three messages pending on each of two consumers")

	cons, err := js.Consumer(ctx, bus.Stream, "a")
	require.NoError(t, err)
	batch, err := cons.Fetch(3)
	require.NoError(t, err)
	for msg := range batch.Messages() {
		require.NoError(t, msg.Ack())
	}
	require.Eventually(t, func() bool {
		n, err := pending(ctx)
		return err == nil && n == 3
	}, 5*time.Second, 10*time.Millisecond, "acked messages are no longer pending")
}
