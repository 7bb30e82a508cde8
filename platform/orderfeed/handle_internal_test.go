package orderfeed

import (
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
	"boxoffice/platform/outbox"
)

// feedMsg is a message of the feed's consumer: a subject and data.
type feedMsg struct {
	jetstream.Msg
	subject string
	data    []byte
}

func (m feedMsg) Subject() string { return m.subject }
func (m feedMsg) Data() []byte    { return m.data }

// msgOf is the message the relay publishes for an event of typ of order,
// in namespace ns.
func msgOf(t testing.TB, ns bus.Namespace, order uuid.UUID, typ string) feedMsg {
	t.Helper()
	env, raw, err := outbox.NewOrderEvent(typ, order, time.Now(), "cid", "", map[string]string{"order_id": order.String()})
	require.NoError(t, err)
	return feedMsg{subject: ns.Subject(env.Subject()), data: raw}
}

// The type a subject names is its event's, in every namespace; the feed
// delivers an event that changes its order to the order's watchers, and
// passes over one that changes nothing without decoding it.
func TestHandle(t *testing.T) { // not parallel: testing.AllocsPerRun
	for _, ns := range []bus.Namespace{bus.ForCell("default"), bus.ForCell("b")} {
		f := New(Config{Logger: slog.New(slog.DiscardHandler)})
		order := uuid.New()
		w := f.Watch(order)
		for _, typ := range []string{outbox.TypeHoldCreated, outbox.TypePaymentIntentCreated, outbox.TypePaymentAuthorized,
			outbox.TypeOrderConfirmed, outbox.TypeCaptureRequested, outbox.TypePaymentCaptured, outbox.TypePaymentFailed, "OrderSomethingNew"} {
			m := msgOf(t, ns, order, typ)
			require.Equal(t, typ, subjectType(m.subject), m.subject)
			f.handle(m)
		}
		events, missed := w.Take()
		require.False(t, missed)
		var got []string
		for _, ev := range events {
			got = append(got, ev.Envelope.EventType)
			require.Equal(t, ev.Envelope.EventType == outbox.TypePaymentFailed, ev.FollowUp)
		}
		require.Equal(t, []string{outbox.TypePaymentIntentCreated, outbox.TypeOrderConfirmed, outbox.TypePaymentFailed, "OrderSomethingNew"}, got)
		require.Equal(t, uint64(8), f.Handled())
		w.Stop()

		var skipped jetstream.Msg = msgOf(t, ns, order, outbox.TypePaymentCaptured)
		require.Zero(t, testing.AllocsPerRun(100, func() { f.handle(skipped) }), "an event that changes no order is not decoded")
	}
}
