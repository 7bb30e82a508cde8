package bus_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
	"boxoffice/testkit/natstest"
)

// Every process provisions the streams at start-up, concurrently and again
// on every restart; the result is the configured streams, unchanged.
func TestProvisionIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	srv := natstest.New(t) // provisions once with defaults
	_, js := srv.Connect(t)
	ctx := context.Background()
	cfg := bus.Config{MaxAge: 48 * time.Hour, Duplicates: 20 * time.Minute}

	errs := make([]error, 5)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = bus.Provision(ctx, js, cfg) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, bus.Provision(ctx, js, cfg))

	s, err := js.Stream(ctx, bus.Stream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"ticketing.>"}, info.Config.Subjects)
	require.Equal(t, jetstream.FileStorage, info.Config.Storage)
	require.Equal(t, 48*time.Hour, info.Config.MaxAge)
	require.Equal(t, 20*time.Minute, info.Config.Duplicates)
	require.Equal(t, 1, info.Config.Replicas)

	dlq, err := js.Stream(ctx, bus.DLQStream)
	require.NoError(t, err)
	dinfo, err := dlq.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"dlq.ticketing.>"}, dinfo.Config.Subjects)
	require.Equal(t, 30*24*time.Hour, dinfo.Config.MaxAge)
}
