package webhooks

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/testkit/dbtest"
)

func TestPrune(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org := uuid.New()
	b.endpoint(t, org, "http://127.0.0.1:1/h", EndpointParams{})
	old := b.message(t, org, EventOrderPaid)
	recent := b.message(t, org, EventOrderPaid)
	dbtest.Exec(t, b.pool, "UPDATE webhook_messages SET created_at = now() - interval '31 days' WHERE id = $1", old)
	dbtest.Exec(t, b.pool, `INSERT INTO webhook_attempts (delivery_id, message_id, endpoint_id, organizer_id, number, trigger, latency_ms, error_class, response_body)
		SELECT id, message_id, endpoint_id, organizer_id, 1, 'original', 5, 'timeout', 'x' FROM webhook_deliveries`)

	d, err := NewDispatcher(b.pool, b.dispatcherConfig())
	require.NoError(t, err)
	n, err := d.Prune(context.Background(), time.Now())
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_messages WHERE id = $1", old), "the payload is gone")
	require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_deliveries WHERE message_id = $1", old))
	require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_attempts WHERE message_id = $1", old))
	require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_messages WHERE id = $1", recent))
	require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_attempts WHERE message_id = $1", recent))

	cfg := b.dispatcherConfig()
	cfg.Retention = time.Hour
	d, err = NewDispatcher(b.pool, cfg)
	require.NoError(t, err)
	n, err = d.Prune(context.Background(), time.Now().Add(2*time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "a configurable window")
}
