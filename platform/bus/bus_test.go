package bus_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
	"boxoffice/testkit"
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

// A server that wants a user and password: the credentials in the URL
// connect, and the log of a reconnect names the server with the password
// redacted.
func TestConnectWithCredentialsInTheURL(t *testing.T) {
	t.Parallel()
	const password = "s3cret-nats-password"
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoSigs: true, NoLog: true, Username: "boxoffice", Password: password})
	require.NoError(t, err)
	srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second))
	t.Cleanup(srv.Shutdown)

	logs := testkit.NewLog(t)
	nc, js, err := bus.Connect(fmt.Sprintf("nats://boxoffice:%s@%s", password, srv.Addr()), "test", logs.Logger)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	_, err = js.AccountInfo(t.Context())
	require.NoError(t, err, "authenticated, and JetStream answers")

	require.NoError(t, nc.ForceReconnect())
	line := logs.WaitForLine(t, 10*time.Second, "the reconnect's log line", func(l testkit.Line) bool { return l["msg"] == "nats reconnected" })
	require.Contains(t, line["url"], srv.Addr().String(), "the server is named")
	logs.RequireNoSecrets(t, password)
}
