package webhooks

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
)

// An endpoint on payload version 2 receives the message with camelCase
// keys, signed over what it receives (the official library verifies it);
// one on version 1 receives the stored bytes; an endpoint moved back to
// version 1 gets its replay in version 1 — the version is the endpoint's
// when each attempt is sent, not when the message was made.
func TestPayloadVersionIsTheEndpointsWhenSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	org := uuid.New()
	v2 := newReceiver(t, status(http.StatusOK))
	v1 := newReceiver(t, status(http.StatusOK))
	e2 := b.endpoint(t, org, v2.URL, EndpointParams{PayloadVersion: PayloadV2})
	require.Equal(t, PayloadV2, e2.PayloadVersion)
	e1 := b.endpoint(t, org, v1.URL, EndpointParams{})
	require.Equal(t, PayloadV1, e1.PayloadVersion, "version 1 unless asked")
	msg := b.message(t, org, EventOrderPaid)
	b.run(t, b.dispatcherConfig(), nil)
	waitFor(t, 10*time.Second, "both delivered", func() bool { return len(v1.requests()) == 1 && len(v2.requests()) == 1 })

	var stored []byte
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT payload FROM webhook_messages WHERE id = $1", msg).Scan(&stored))
	require.Equal(t, string(stored), string(v1.requests()[0].body), "version 1 is the stored message, to the byte")
	got := v2.requests()[0]
	wh, err := standardwebhooks.NewWebhook(e2.Secret)
	require.NoError(t, err)
	require.NoError(t, wh.Verify(got.body, got.header), "signed over the version-2 body")
	var body struct {
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(got.body, &body))
	require.Equal(t, EventOrderPaid, body.Type)
	require.Contains(t, body.Data, "orderId")
	require.Contains(t, body.Data, "amountMinor")
	require.NotContains(t, body.Data, "order_id")

	one := PayloadV1
	_, err = b.svc.Update(ctx, org, e2.ID, EndpointUpdate{PayloadVersion: &one})
	require.NoError(t, err)
	_, err = b.svc.Replay(ctx, org, msg, ReplayParams{EndpointID: &e2.ID})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "the replay", func() bool { return len(v2.requests()) == 2 })
	require.Equal(t, string(stored), string(v2.requests()[1].body), "the replay goes out in the endpoint's version now")

	three := 3
	_, err = b.svc.Update(ctx, org, e2.ID, EndpointUpdate{PayloadVersion: &three})
	var verr *ValidationError
	require.ErrorAs(t, err, &verr)
	_, err = b.svc.Create(ctx, org, EndpointParams{URL: v2.URL + "/x", PayloadVersion: 3})
	require.ErrorAs(t, err, &verr)
}
