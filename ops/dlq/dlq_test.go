package dlq_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/consumers"
	"boxoffice/ops/dlq"
	"boxoffice/platform/bus"
	"boxoffice/platform/outbox"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/natstest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// Two consumers follow one subject: "steady" applies every event, "flaky"
// gives up on them while it is broken. Its dead letters are listed with
// their reason, replayed once it is fixed — "flaky" applies them, "steady"
// gets the replay too and its inbox makes it a no-op — or discarded; the
// depth gauge follows.
func TestDeadLetterWorkflow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	dbtest.Exec(t, pool, `CREATE TABLE effects (event_id uuid NOT NULL, consumer text NOT NULL)`)
	srv := natstest.New(t)
	_, js := srv.Connect(t)
	require.NoError(t, bus.Provision(ctx, js, bus.Config{}))
	logs := testkit.NewLog(t)

	var broken atomic.Bool
	broken.Store(true)
	start := func(name string, fail *atomic.Bool) {
		c, err := consumers.New(pool, js, consumers.Config{
			Name: name, FilterSubjects: []string{bus.SubjectPrefix + "order.TestEvent"}, MaxDeliver: 3,
			BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond, Logger: logs.Logger, Registerer: prometheus.NewRegistry(),
		}, func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
			if fail != nil && fail.Load() {
				return fmt.Errorf("%w: handler is broken", consumers.ErrPermanent)
			}
			_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, consumer) VALUES ($1, $2)`, ev.EventID, name)
			return err
		})
		require.NoError(t, err)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(runCtx) }()
		t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	}
	start("steady", nil)
	start("flaky", &broken)

	publish := func() uuid.UUID {
		ev, raw, err := outbox.NewOrderEvent("TestEvent", uuid.New(), time.Now(), "corr", "", map[string]string{"k": "v"})
		require.NoError(t, err)
		_, err = js.PublishMsg(ctx, &nats.Msg{Subject: bus.SubjectPrefix + "order.TestEvent", Data: raw}, jetstream.WithMsgID(ev.EventID.String()))
		require.NoError(t, err)
		return ev.EventID
	}
	effects := func(consumer string) int64 {
		return dbtest.Count(t, pool, "SELECT count(*) FROM effects WHERE consumer = $1", consumer)
	}
	q := dlq.New(js, bus.ForCell(""), logs.Logger)
	depth := func() uint64 {
		d, err := q.Depth(ctx)
		require.NoError(t, err)
		return d["flaky"]
	}

	kept, dropped := publish(), publish()
	require.Eventually(t, func() bool { return depth() == 2 && effects("steady") == 2 }, 30*time.Second, 20*time.Millisecond)
	reg := prometheus.NewRegistry()
	reg.MustRegister(dlq.NewDepthCollector(q))
	families, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, families, 1)
	require.Equal(t, "boxoffice_dead_letters", families[0].GetName())
	require.Len(t, families[0].GetMetric(), 1, "one consumer has dead letters")
	require.EqualValues(t, 2, families[0].GetMetric()[0].GetGauge().GetValue())

	letters, err := q.List(ctx, dlq.Filter{Consumer: "flaky"}, time.Now())
	require.NoError(t, err)
	require.Len(t, letters, 2)
	// Dead-lettered in whatever order the consumer gave up on them.
	if letters[0].EventID != kept.String() {
		letters[0], letters[1] = letters[1], letters[0]
	}
	require.Equal(t, kept.String(), letters[0].EventID)
	require.Equal(t, dropped.String(), letters[1].EventID)
	require.Contains(t, letters[0].Reason, "permanent")
	require.Equal(t, bus.SubjectPrefix+"order.TestEvent", letters[0].OriginalSubject)
	none, err := q.List(ctx, dlq.Filter{Consumer: "flaky", OlderThan: time.Hour}, time.Now())
	require.NoError(t, err)
	require.Empty(t, none)

	require.Error(t, q.Replay(ctx, letters[0].Seq, "", ""), "who and why are required")
	broken.Store(false)
	require.NoError(t, q.Replay(ctx, letters[0].Seq, "ops@example", "handler fixed"))
	require.Eventually(t, func() bool { return effects("flaky") == 1 }, 30*time.Second, 20*time.Millisecond)
	require.ErrorIs(t, q.Replay(ctx, letters[0].Seq, "ops@example", "again"), dlq.ErrNotFound)

	require.NoError(t, q.Discard(ctx, letters[1].Seq, "ops@example", "test event, not needed"))
	require.Zero(t, depth())
	// Nothing more arrives: a canary published now is applied by both, and
	// by then the replay (published earlier) was too.
	canary := publish()
	require.Eventually(t, func() bool {
		return dbtest.Count(t, pool, "SELECT count(*) FROM effects WHERE event_id = $1", canary) == 2
	}, 30*time.Second, 20*time.Millisecond)
	require.EqualValues(t, 3, effects("steady"), "the replay was a no-op for the consumer that had applied it")
	require.EqualValues(t, 2, effects("flaky"), "the replayed event and the canary; not the discarded one")
	require.Zero(t, dbtest.Count(t, pool, "SELECT count(*) FROM effects WHERE event_id = $1 AND consumer = 'flaky'", dropped))
	for _, msg := range []string{"dead letter replayed", "dead letter discarded"} {
		line := logs.WaitForLine(t, 5*time.Second, msg, func(l testkit.Line) bool { return l["msg"] == msg })
		require.Equal(t, "ops@example", line["by"], "%s: who", msg)
		require.NotEmpty(t, line["why"], "%s: why", msg)
	}
}
