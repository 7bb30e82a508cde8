package relay_test

import (
	"context"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
	"boxoffice/relay"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/natstest"
)

// benchEvents is how many events each drain benchmark moves.
const benchEvents = 100_000

// benchWindow is the async publish window of both drain benchmarks: the
// relay's default MaxInFlight.
const benchWindow = 4096

// BenchmarkRelayDrain measures one relay with the default configuration
// draining a backlog of benchEvents pending rows of about 512 bytes: from
// Run to the last row deleted as published. Compare events/s with
// BenchmarkJetStreamPublishAsync from the same run.
func BenchmarkRelayDrain(b *testing.B) {
	for range b.N {
		b.StopTimer()
		tb := setup(b)
		insertRows(b, tb.pool, benchEvents)
		dbtest.Exec(b, tb.pool, "VACUUM ANALYZE outbox")
		r, reg := tb.newRelay(b, relay.Config{MaxInFlight: benchWindow, Logger: quietLogger(b)})
		ctx, cancel := context.WithCancel(b.Context())
		b.StartTimer()

		started := time.Now()
		run := start(b, ctx, r)
		waitPublished(b, reg, benchEvents)
		elapsed := time.Since(started)

		b.StopTimer()
		cancel()
		require.NoError(b, run.stop())
		require.Equal(b, int64(0), unpublished(b, tb.pool))
		require.Equal(b, uint64(benchEvents), streamMsgs(b, tb.js))
		b.ReportMetric(benchEvents/elapsed.Seconds(), "events/s")
		b.StartTimer()
	}
}

// BenchmarkJetStreamPublishAsync is the ceiling for BenchmarkRelayDrain:
// the same number of 512-byte messages, with message ids and the expected
// stream, published asynchronously to the same kind of embedded server
// (file storage) with the same window, until every one is acknowledged.
func BenchmarkJetStreamPublishAsync(b *testing.B) {
	data := make([]byte, 512)
	for i := range data {
		data[i] = 'x'
	}
	for range b.N {
		b.StopTimer()
		srv := natstest.New(b)
		nc, _ := srv.Connect(b)
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(benchWindow))
		require.NoError(b, err)
		ids := make([]string, benchEvents)
		for i := range ids {
			ids[i] = uuid.NewString()
		}
		futures := make([]jetstream.PubAckFuture, benchEvents)
		b.StartTimer()

		started := time.Now()
		for i := range benchEvents {
			futures[i], err = js.PublishMsgAsync(&nats.Msg{Subject: "ticketing.order.HoldCreated", Data: data, Header: make(nats.Header, 2)},
				jetstream.WithMsgID(ids[i]), jetstream.WithExpectStream(bus.Stream))
			require.NoError(b, err)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				require.NoError(b, err)
			}
		}
		elapsed := time.Since(started)

		b.StopTimer()
		_, verify := srv.Connect(b)
		require.Equal(b, uint64(benchEvents), streamMsgs(b, verify))
		b.ReportMetric(benchEvents/elapsed.Seconds(), "events/s")
		b.StartTimer()
	}
}

// BenchmarkRelaySteadyLatency runs one relay with the default
// configuration while a producer commits steadyRate rows a second, in small
// batches every few milliseconds, for steadyFor; then it reports the
// distribution of commit-to-acknowledgement latency the relay records in
// boxoffice_outbox_publish_latency_seconds (the database clock), as the
// upper bounds of the histogram buckets holding each percentile.
func BenchmarkRelaySteadyLatency(b *testing.B) {
	const (
		steadyRate = 4000
		steadyFor  = 10 * time.Second
		tick       = 5 * time.Millisecond
	)
	for range b.N {
		b.StopTimer()
		tb := setup(b)
		r, reg := tb.newRelay(b, relay.Config{Logger: quietLogger(b)})
		run := start(b, b.Context(), r)
		b.StartTimer()

		// The producer tops the outbox up to the rate on every tick, so a
		// slow insert delays rows instead of dropping them.
		started := time.Now()
		ticker := time.NewTicker(tick)
		inserted := 0
		for now := range ticker.C {
			elapsed := now.Sub(started)
			if elapsed > steadyFor {
				break
			}
			if due := int(elapsed.Seconds()*steadyRate) - inserted; due > 0 {
				insertRows(b, tb.pool, due)
				inserted += due
			}
		}
		ticker.Stop()
		waitPublished(b, reg, inserted)

		b.StopTimer()
		require.NoError(b, run.stop())
		b.ReportMetric(float64(inserted)/steadyFor.Seconds(), "events/s")
		b.ReportMetric(latencyQuantile(b, reg, 0.5)*1000, "p50≤ms")
		b.ReportMetric(latencyQuantile(b, reg, 0.99)*1000, "p99≤ms")
		b.ReportMetric(latencyQuantile(b, reg, 0.999)*1000, "p99.9≤ms")
		b.StartTimer()
	}
}

// waitPublished returns once the relay has counted n rows published, by
// its own counter, which costs the database nothing. The counter runs just
// ahead of the marking (one settle statement); a relay stopped after it
// still marks the batch it counted.
func waitPublished(tb testing.TB, reg *prometheus.Registry, n int) {
	tb.Helper()
	require.Eventually(tb, func() bool {
		return metric(tb, reg, "boxoffice_relay_published_total") >= float64(n)
	}, 5*time.Minute, 5*time.Millisecond)
}

// quietLogger keeps benchmark output to warnings and errors.
func quietLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// latencyQuantile returns the upper bound of the histogram bucket of
// boxoffice_outbox_publish_latency_seconds that holds quantile q.
func latencyQuantile(tb testing.TB, reg *prometheus.Registry, q float64) float64 {
	tb.Helper()
	families, err := reg.Gather()
	require.NoError(tb, err)
	for _, f := range families {
		if f.GetName() != "boxoffice_outbox_publish_latency_seconds" {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		want := q * float64(h.GetSampleCount())
		for _, bucket := range h.GetBucket() {
			if float64(bucket.GetCumulativeCount()) >= want {
				return bucket.GetUpperBound()
			}
		}
		return math.Inf(1)
	}
	tb.Fatal("no boxoffice_outbox_publish_latency_seconds histogram")
	return 0
}
