package payments_test

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/webhook"

	"boxoffice/domain/payments"
)

// Verify reads a signed event once, into the fields the ingress uses: its
// id, type and data.object's bytes (decodeObject's input), whose metadata
// names the order (OrderOfEvent); a bad signature is refused unread.
func TestVerifyReadsTheEventOnce(t *testing.T) {
	t.Parallel()
	const secret = "whsec_test_verify"
	in := payments.NewIngress(nil, payments.IngressConfig{WebhookSecret: secret, Logger: slog.New(slog.DiscardHandler)})
	order := uuid.New()
	object := `{"id":"pi_1","object":"payment_intent","amount":5000,"metadata":{"order_id":"` + order.String() + `"}}`
	payload := []byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","created":1700000000,"livemode":false,` +
		`"api_version":"2024-06-20","data":{"object":` + object + `}}`)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: time.Now()})

	ev, err := in.Verify(signed.Payload, signed.Header)
	require.NoError(t, err)
	require.Equal(t, "evt_1", ev.ID)
	require.Equal(t, stripe.EventType("payment_intent.succeeded"), ev.Type)
	require.EqualValues(t, 1700000000, ev.Created)
	require.JSONEq(t, object, string(ev.Data.Raw))
	got, ok := payments.OrderOfEvent(ev)
	require.True(t, ok)
	require.Equal(t, order, got)

	noOrder, err := json.Marshal(map[string]any{"id": "evt_2", "type": "payment_intent.succeeded", "data": map[string]any{"object": map[string]any{"id": "pi_2"}}})
	require.NoError(t, err)
	signed = webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: noOrder, Secret: secret, Timestamp: time.Now()})
	ev, err = in.Verify(signed.Payload, signed.Header)
	require.NoError(t, err)
	_, ok = payments.OrderOfEvent(ev)
	require.False(t, ok, "no metadata names an order")

	signed = webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: "whsec_other", Timestamp: time.Now()})
	_, err = in.Verify(signed.Payload, signed.Header)
	require.ErrorIs(t, err, payments.ErrBadSignature)
}
