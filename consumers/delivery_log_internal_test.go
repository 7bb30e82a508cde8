package consumers

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/outbox"
)

// benchMsg is a delivered message as handleBatch sees it: headers and
// metadata; nothing else is called.
type benchMsg struct {
	jetstream.Msg
	h  nats.Header
	md *jetstream.MsgMetadata
}

func (m *benchMsg) Headers() nats.Header                      { return m.h }
func (m *benchMsg) Metadata() (*jetstream.MsgMetadata, error) { return m.md, nil }

// BenchmarkDeliveryLog measures what one delivery's logging costs the
// consumer when the message is applied: its attributes (message,
// delivery, event) and the outcome's line, which is at debug level, so
// dropped at the production level (info) and written at debug.
func BenchmarkDeliveryLog(b *testing.B) {
	ev, _, err := outbox.NewOrderEvent("TestEvent", uuid.New(), time.Now(), "corr-"+uuid.NewString(), "cause-"+uuid.NewString(), map[string]any{})
	if err != nil {
		b.Fatal(err)
	}
	msg := &benchMsg{
		h:  nats.Header{jetstream.MsgIDHeader: []string{ev.EventID.String()}},
		md: &jetstream.MsgMetadata{NumDelivered: 1, Sequence: jetstream.SequencePair{Stream: 42, Consumer: 42}},
	}
	for _, bc := range []struct {
		name  string
		level slog.Level
	}{{"LineDropped", slog.LevelInfo}, {"LineWritten", slog.LevelDebug}} {
		b.Run(bc.name, func(b *testing.B) {
			logger := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: bc.level}))
			c := &Consumer{logger: logger.With("component", "consumer", "consumer", "bench"), metrics: newMetrics(nil, "bench"), policy: policy{maxDeliver: 5}}
			ctx := context.Background()
			o := outcome{kind: outcomeApplied, numDelivered: 1}
			a := decide(o, c.policy)
			b.ReportAllocs()
			for b.Loop() {
				d := c.newDelivery(ctx, msg)
				d.setEvent(ev)
				c.logOutcome(ctx, d, o, a)
			}
		})
	}
}

// A delivery's line carries everything known of it, as the loggers built
// with With did: the message, the delivery, the event and the outcome.
func TestDeliveryLineCarriesEveryField(t *testing.T) {
	t.Parallel()
	ev, _, err := outbox.NewOrderEvent("TestEvent", uuid.New(), time.Now(), "corr-1", "cause-1", map[string]any{})
	require.NoError(t, err)
	msg := &benchMsg{
		h:  nats.Header{jetstream.MsgIDHeader: []string{"msg-1"}},
		md: &jetstream.MsgMetadata{NumDelivered: 3, Sequence: jetstream.SequencePair{Stream: 42, Consumer: 7}},
	}
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := &Consumer{logger: logger.With("component", "consumer"), metrics: newMetrics(nil, "test"), policy: policy{maxDeliver: 5}}
	d := c.newDelivery(t.Context(), msg)
	d.setEvent(ev)
	o := outcome{kind: outcomeApplied, numDelivered: 3}
	c.logOutcome(t.Context(), d, o, decide(o, c.policy))

	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
	require.Equal(t, map[string]any{
		"time": line["time"], "level": "DEBUG", "msg": "event applied", "component": "consumer",
		"msg_id": "msg-1", "num_delivered": 3.0, "stream_seq": 42.0,
		"event_id": ev.EventID.String(), "event_type": "TestEvent", "order_id": ev.AggregateID.String(),
		"correlation_id": "corr-1", "causation_id": "cause-1",
		"outcome": o.kind.String(), "action": decide(o, c.policy).kind.String(),
	}, line)
}
