package bus_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
	"boxoffice/platform/outbox"
)

// A subject is spelled one way: what the outbox stores with a row is what
// a consumer that names the row's type reads.
func TestSubject(t *testing.T) {
	require.Equal(t, "ticketing.order.PaymentCaptured", bus.Subject(outbox.AggregateOrder, outbox.TypePaymentCaptured))
	require.Equal(t, []string{"ticketing.order.HoldExpired", "ticketing.order.OrderCanceled"},
		bus.Subjects(outbox.AggregateOrder, outbox.TypeHoldExpired, outbox.TypeOrderCanceled))
	env, _, err := outbox.NewOrderEvent(outbox.TypePaymentCaptured, uuid.New(), time.Now(), "corr", "", struct{}{})
	require.NoError(t, err)
	require.Equal(t, bus.Subject(outbox.AggregateOrder, outbox.TypePaymentCaptured), env.Subject())
}
