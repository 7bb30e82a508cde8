package webhooks

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/testkit/dbtest"
)

// BenchmarkDispatch measures deliveries per second to a local sink that
// answers 204: claiming, signing, POSTing and recording one attempt row
// per delivery (and the delivery's new state) in PostgreSQL. Run it with
// a fixed count, e.g. -benchtime 20000x.
func BenchmarkDispatch(b *testing.B) {
	pool := dbtest.New(b)
	logger := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var received atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		received.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(sink.Close)
	org := uuid.New()
	svc := NewService(pool, ServiceConfig{Guard: &Guard{AllowPrivate: true}, Keys: testKeys, Logger: logger})
	e, err := svc.Create(context.Background(), org, EndpointParams{URL: sink.URL, MaxConcurrency: MaxConcurrencyLimit})
	require.NoError(b, err)
	queue(b, pool, org, e.ID, b.N)
	_, err = pool.Exec(context.Background(), "VACUUM ANALYZE webhook_deliveries, webhook_messages")
	require.NoError(b, err)

	d, err := NewDispatcher(pool, DispatcherConfig{
		Guard: &Guard{AllowPrivate: true}, Keys: testKeys, PollInterval: 5 * time.Millisecond, Logger: logger,
		MaxInFlightPerOrganizer: 1024, MaxInFlight: 1024, BatchSize: 1000,
	})
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.ResetTimer()
	start := time.Now()
	go func() {
		defer close(done)
		_ = d.Run(ctx)
	}()
	for {
		var n int64
		require.NoError(b, pool.QueryRow(context.Background(), "SELECT count(*) FROM webhook_attempts").Scan(&n))
		if n >= int64(b.N) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	<-done
	var ok int64
	require.NoError(b, pool.QueryRow(context.Background(), "SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded'").Scan(&ok))
	require.Equal(b, int64(b.N), ok)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "deliveries/s")
}
