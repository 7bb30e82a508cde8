package failover_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/migrations"
	"boxoffice/ops/failover"
	"boxoffice/platform/bus"
	"boxoffice/platform/db"
	"boxoffice/platform/pgcluster"
	"boxoffice/platform/promreg"
	"boxoffice/testkit/fixture"
	"boxoffice/testkit/natstest"
)

// region is one region's database of the test.
type region struct {
	cluster *pgcluster.Cluster
	pool    *pgxpool.Pool // an operator session: no epoch
}

func startPrimary(t *testing.T) region {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Config{Dir: clusterDir(t), Fast: true, Temporary: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	require.NoError(t, migrations.Up(ctx, c.URL()))
	return region{cluster: c, pool: operatorPool(t, c.URL())}
}

func startStandby(t *testing.T, primary region) region {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.StartStandby(ctx, primary.cluster, pgcluster.Config{Dir: clusterDir(t), Fast: true, Temporary: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return region{cluster: c, pool: operatorPool(t, c.URL())}
}

func operatorPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := db.NewPool(t.Context(), db.PoolConfig{URL: url, MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func clusterDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	}
	return filepath.Join(dir, "pg")
}

// rolePool is a pool of a role on region epoch epoch.
func rolePool(t *testing.T, url string, epoch int64) *pgxpool.Pool {
	t.Helper()
	pool, err := db.NewPool(t.Context(), db.PoolConfig{URL: url, MaxConns: 2, RegionEpoch: epoch})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// waitReplayed waits until the standby has replayed everything the
// primary has written so far.
func waitReplayed(t *testing.T, primary, standby region) {
	t.Helper()
	var lsn string
	require.NoError(t, primary.pool.QueryRow(t.Context(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn))
	waitFor(t, "standby replayed "+lsn, func() bool {
		var ok bool
		require.NoError(t, standby.pool.QueryRow(t.Context(), "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&ok))
		return ok
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "not within 30s: %s", what)
		time.Sleep(20 * time.Millisecond)
	}
}

// The whole failover, step by step against real engines, each step twice:
// the primary stops and is fenced, dies; the standby database and stream
// copies are promoted at the new epoch with the recovery point stored; the
// old epoch cannot write anywhere and the new one can; resume reopens
// exactly what the failover paused.
func TestFailoverStepByStep(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	primary := startPrimary(t)
	standby := startStandby(t, primary)
	pnats, snats := natstest.NewRegions(t, bus.Config{})
	_, pjs := pnats.Connect(t)
	_, sjs := snats.Connect(t)

	selling := fixture.NewEvent(t, primary.pool, fixture.EventSpec{})
	paused := fixture.NewEvent(t, primary.pool, fixture.EventSpec{})
	_, err := primary.pool.Exec(ctx, "INSERT INTO onsales (event_id, paused) VALUES ($1, true)", paused.ID)
	require.NoError(t, err)
	fixture.Hold(t, primary.pool, selling.ID, "c1", selling.Seats[0]) // an outbox row
	for i := range 5 {
		_, err := pjs.PublishMsg(ctx, &nats.Msg{Subject: fmt.Sprintf("ticketing.order.created.%d", i)}, jetstream.WithMsgID(fmt.Sprint(i)))
		require.NoError(t, err)
	}
	waitReplayed(t, primary, standby)
	waitFor(t, "stream copied", func() bool {
		c, err := bus.StandbyCopies(ctx, sjs, bus.Namespace{})
		return err == nil && c[0].LastSeq == 5
	})

	src := failover.Sources{Standby: standby.pool, StandbyJS: sjs, Primary: primary.pool, PrimaryJS: pjs}
	rp, err := failover.Measure(ctx, src)
	require.NoError(t, err)
	require.True(t, rp.InRecovery)
	require.NotEmpty(t, rp.ReplayLSN)
	require.NotNil(t, rp.ReplayLagBytes)
	require.NotNil(t, rp.PrimaryLastSeq)
	require.Equal(t, uint64(5), *rp.PrimaryLastSeq)
	require.Zero(t, rp.StreamLag)
	require.Positive(t, rp.OutboxUnpublished)
	var out bytes.Buffer
	require.NoError(t, rp.Write(&out))
	require.Contains(t, out.String(), "copy lag 0 events")

	// 1. Stop: every open onsale paused, the primary fenced at epoch 2.
	old := rolePool(t, primary.cluster.URL(), 1)
	stop, err := failover.Stop(ctx, primary.pool, 2)
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{selling.ID}, stop.Paused, "the organizer's paused onsale is not the failover's")
	require.Equal(t, failover.Fenced{Before: 1, After: 2}, stop.Fenced)
	stop, err = failover.Stop(ctx, primary.pool, 2)
	require.NoError(t, err)
	require.Empty(t, stop.Paused, "a second stop pauses nothing")
	require.Equal(t, failover.Fenced{Before: 2, After: 2}, stop.Fenced)
	_, err = old.Exec(ctx, "UPDATE onsales SET paused = false")
	require.ErrorContains(t, err, "fenced", "the old epoch writes nothing on the fenced primary")

	// 2. The primary region dies.
	waitReplayed(t, primary, standby)
	require.NoError(t, primary.cluster.Kill(ctx))
	pnats.Stop()

	// 3. Promote, twice.
	src.Primary, src.PrimaryJS = nil, nil
	res, err := failover.Promote(ctx, failover.PromoteParams{Sources: src, Epoch: 2})
	require.NoError(t, err)
	require.True(t, res.DatabasePromoted)
	require.Equal(t, []string{bus.Stream, bus.DLQStream}, res.StreamsPromoted)
	require.Equal(t, failover.Fenced{Before: 2, After: 2}, res.Fenced, "the fence replicated")
	require.Empty(t, res.Paused, "the pauses replicated")
	require.Nil(t, res.Point.ReplayLagBytes, "the primary did not answer")
	out.Reset()
	require.NoError(t, res.Write(&out))
	require.Contains(t, out.String(), "database promoted")
	again, err := failover.Promote(ctx, failover.PromoteParams{Sources: src, Epoch: 2})
	require.NoError(t, err)
	require.False(t, again.DatabasePromoted)
	require.Empty(t, again.StreamsPromoted)
	require.Equal(t, res.Report, again.Report, "the first recovery point is kept")
	var stored int
	require.NoError(t, standby.pool.QueryRow(ctx, "SELECT count(*) FROM failover_recovery_points WHERE epoch = 2 AND stream_last_seq = 5").Scan(&stored))
	require.Equal(t, 1, stored)

	// The old epoch cannot write on the promoted database; the new can.
	_, err = rolePool(t, standby.cluster.URL(), 1).Exec(ctx, "UPDATE onsales SET paused = false")
	require.ErrorContains(t, err, "fenced")
	_, err = rolePool(t, standby.cluster.URL(), 2).Exec(ctx, "UPDATE onsales SET max_rate = NULL")
	require.NoError(t, err)
	require.NoError(t, bus.Provision(ctx, sjs, bus.Config{}), "the standby's roles can provision")

	// 4. Resume, twice.
	resumed, err := failover.Resume(ctx, standby.pool, 2)
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{selling.ID}, resumed)
	resumed, err = failover.Resume(ctx, standby.pool, 2)
	require.NoError(t, err)
	require.Empty(t, resumed)
	var stillPaused bool
	require.NoError(t, standby.pool.QueryRow(ctx, "SELECT paused FROM onsales WHERE event_id = $1", paused.ID).Scan(&stillPaused))
	require.True(t, stillPaused, "the organizer's pause stays")
}

// The lag metrics are read from the real engines at each scrape: the
// replica is caught up and the copy complete, then the primary's bus
// stops and the copy's contact age grows.
func TestCollectorExportsTheLag(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	primary := startPrimary(t)
	standby := startStandby(t, primary)
	pnats, snats := natstest.NewRegions(t, bus.Config{})
	_, pjs := pnats.Connect(t)
	_, sjs := snats.Connect(t)
	_, err := pjs.Publish(ctx, "ticketing.order.created", nil)
	require.NoError(t, err)
	waitReplayed(t, primary, standby)
	waitFor(t, "stream copied", func() bool {
		c, err := bus.StandbyCopies(ctx, sjs, bus.Namespace{})
		return err == nil && c[0].LastSeq == 1
	})

	reg := prometheus.NewPedanticRegistry()
	promreg.Register(reg, &failover.Collector{Sources: failover.Sources{Standby: standby.pool, StandbyJS: sjs, Primary: primary.pool, PrimaryJS: pjs}})
	got := gather(t, reg)
	require.Equal(t, 1.0, got["boxoffice_failover_standby_up"])
	require.Equal(t, 0.0, got["boxoffice_failover_standby_promoted"])
	require.Equal(t, 0.0, got[`boxoffice_failover_stream_copy_lag_messages{stream="TICKETING"}`])
	require.Equal(t, 0.0, got[`boxoffice_failover_stream_copy_lag_messages{stream="TICKETING_DLQ"}`])
	require.Contains(t, got, "boxoffice_failover_replica_replay_lag_bytes")
	require.Contains(t, got, `boxoffice_failover_stream_copy_contact_age_seconds{stream="TICKETING"}`)

	// Without the standby's database, the scrape says so.
	closed := operatorPool(t, standby.cluster.URL())
	closed.Close()
	down := prometheus.NewPedanticRegistry()
	down.MustRegister(&failover.Collector{Sources: failover.Sources{Standby: closed, StandbyJS: sjs}, Timeout: time.Second})
	require.Equal(t, map[string]float64{"boxoffice_failover_standby_up": 0}, gather(t, down))
}

// gather scrapes reg into name{labels} → value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			out[name] = m.GetGauge().GetValue()
		}
	}
	return out
}

// Failback is a second failover, at epoch 3, never the first reversed: the
// old region is rebuilt as a standby of the new primary (a fresh base
// backup; its old streams deleted and mirrored anew from the new
// primary's, over the same leafnode), then stop, promote and resume run
// again. Every event and order survives both moves, and epoch 2 can no
// longer write.
func TestFailbackAtTheNextEpoch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	a := startPrimary(t)
	b := startStandby(t, a)
	anats, bnats := natstest.NewRegions(t, bus.Config{})
	_, ajs := anats.Connect(t)
	_, bjs := bnats.Connect(t)
	ev := fixture.NewEvent(t, a.pool, fixture.EventSpec{})
	_, err := ajs.PublishMsg(ctx, &nats.Msg{Subject: "ticketing.order.created.a"}, jetstream.WithMsgID("in-a"))
	require.NoError(t, err)
	waitReplayed(t, a, b)
	waitFor(t, "stream copied to b", func() bool {
		c, err := bus.StandbyCopies(ctx, bjs, bus.Namespace{})
		return err == nil && c[0].LastSeq == 1
	})

	// Failover to b at epoch 2; b sells.
	_, err = failover.Stop(ctx, a.pool, 2)
	require.NoError(t, err)
	waitReplayed(t, a, b)
	require.NoError(t, a.cluster.Kill(ctx))
	_, err = failover.Promote(ctx, failover.PromoteParams{Sources: failover.Sources{Standby: b.pool, StandbyJS: bjs}, Epoch: 2})
	require.NoError(t, err)
	_, err = failover.Resume(ctx, b.pool, 2)
	require.NoError(t, err)
	_, err = bjs.PublishMsg(ctx, &nats.Msg{Subject: "ticketing.order.created.b"}, jetstream.WithMsgID("in-b"))
	require.NoError(t, err)
	fixture.NewEvent(t, rolePool(t, b.cluster.URL(), 2), fixture.EventSpec{Name: "sold in b"})

	// The old region is rebuilt as b's standby: a new base backup, and its
	// streams, deleted, mirrored anew from b's domain.
	a2 := startStandby(t, b)
	for _, s := range []string{bus.Stream, bus.DLQStream} {
		require.NoError(t, ajs.DeleteStream(ctx, s))
	}
	// The server removes a deleted stream's store as it answers the
	// delete; on a loaded machine creating the same stream at once can
	// fail ("error creating store for stream", 10049) until the removal
	// is done, so the rebuild is retried as an operator would.
	var provisioned error
	waitFor(t, "standby streams provisioned", func() bool {
		provisioned = bus.ProvisionStandby(ctx, ajs, bus.Config{}, natstest.StandbyDomain)
		if provisioned != nil {
			t.Logf("provision standby streams: %v", provisioned)
		}
		return provisioned == nil
	})
	require.NoError(t, provisioned)
	waitReplayed(t, b, a2)
	waitFor(t, "stream copied back to a", func() bool {
		c, err := bus.StandbyCopies(ctx, ajs, bus.Namespace{})
		return err == nil && c[0].LastSeq == 2
	})

	// Failback at epoch 3.
	stop, err := failover.Stop(ctx, b.pool, 3)
	require.NoError(t, err)
	require.Equal(t, failover.Fenced{Before: 2, After: 3}, stop.Fenced)
	waitReplayed(t, b, a2)
	res, err := failover.Promote(ctx, failover.PromoteParams{Sources: failover.Sources{Standby: a2.pool, StandbyJS: ajs, Primary: b.pool, PrimaryJS: bjs}, Epoch: 3})
	require.NoError(t, err)
	require.True(t, res.DatabasePromoted)
	require.Equal(t, []string{bus.Stream, bus.DLQStream}, res.StreamsPromoted)
	require.NotNil(t, res.Point.ReplayLagBytes, "b answered: the lag is exact")
	require.Zero(t, *res.Point.ReplayLagBytes)
	require.Zero(t, res.Point.StreamLag)
	resumed, err := failover.Resume(ctx, a2.pool, 3)
	require.NoError(t, err)
	require.Len(t, resumed, 2, "both onsales the failback paused reopen")
	require.Contains(t, resumed, ev.ID)

	var events int
	require.NoError(t, a2.pool.QueryRow(ctx, "SELECT count(*) FROM events").Scan(&events))
	require.Equal(t, 2, events, "what a and b sold is in a again")
	s, err := ajs.Stream(ctx, bus.Stream)
	require.NoError(t, err)
	for seq, id := range map[uint64]string{1: "in-a", 2: "in-b"} {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		require.Equal(t, id, m.Header.Get(jetstream.MsgIDHeader))
	}
	_, err = rolePool(t, a2.cluster.URL(), 2).Exec(ctx, "UPDATE onsales SET paused = paused WHERE false")
	require.True(t, db.IsFenced(err), "epoch 2 writes nothing after the failback: %v", err)
	_, err = rolePool(t, a2.cluster.URL(), 3).Exec(ctx, "UPDATE onsales SET paused = paused WHERE false")
	require.NoError(t, err)
}
