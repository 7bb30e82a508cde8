package consumers

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
