package webhooks

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestCamelCase(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"order_id": "orderId", "payment_intent_id": "paymentIntentId", "seat_ids": "seatIds",
		"type": "type", "data": "data", "qr_payload": "qrPayload",
	} {
		require.Equal(t, want, CamelCase(in), in)
	}
}

// Version 2 is version 1 with every key in camelCase, in the same order,
// nested objects and lists included, values untouched; version 1 is the
// stored bytes themselves.
func TestEncodeForRenamesEveryKeyAndNothingElse(t *testing.T) {
	t.Parallel()
	data := TicketIssuedData{OrderData: OrderData{OrderID: uuid.New(), EventID: uuid.New(), AmountMinor: 4200}, TicketIDs: []uuid.UUID{uuid.New()}}
	body, err := encodeBody(EventTicketIssued, time.Date(2026, 12, 4, 1, 2, 3, 0, time.UTC), data)
	require.NoError(t, err)

	same, err := EncodeFor(PayloadV1, body)
	require.NoError(t, err)
	require.Equal(t, body, same)

	v2, err := EncodeFor(PayloadV2, body)
	require.NoError(t, err)
	require.NotContains(t, string(v2), "_id")
	var got map[string]any
	require.NoError(t, json.Unmarshal(v2, &got))
	require.Equal(t, EventTicketIssued, got["type"])
	d := got["data"].(map[string]any)
	require.Equal(t, data.OrderID.String(), d["orderId"])
	require.Equal(t, data.EventID.String(), d["eventId"])
	require.Equal(t, []any{data.TicketIDs[0].String()}, d["ticketIds"])
	require.InDelta(t, 4200, d["amountMinor"], 0)

	nested, err := EncodeFor(PayloadV2, []byte(`{"a_b":[{"c_d":1.50,"e":null,"f_g":"x_y"}],"h":true}`))
	require.NoError(t, err)
	require.Equal(t, `{"aB":[{"cD":1.50,"e":null,"fG":"x_y"}],"h":true}`, string(nested), "keys renamed, values and number digits kept")

	_, err = EncodeFor(PayloadV2, []byte(`{"a":1} {}`))
	require.Error(t, err)
	_, err = EncodeFor(PayloadV2, []byte(`{"a":`))
	require.Error(t, err)
}
