-- name: WebhookOrderSubject :one
-- Returns what the fan-out needs to know about an order: its event, the
-- organizer that owns the event, and the order's status and amount.
SELECT o.event_id, e.organizer_id, o.status, o.amount_minor, o.currency
FROM orders o JOIN events e ON e.id = o.event_id
WHERE o.id = @order_id::uuid;

-- name: WebhookEndpointAnyForOrganizer :one
-- Reports whether the organizer has an enabled endpoint for event_type.
SELECT EXISTS (
    SELECT 1 FROM webhook_endpoints
    WHERE organizer_id = @organizer_id::uuid AND enabled
      AND (cardinality(event_types) = 0 OR @event_type::text = ANY(event_types))
) AS subscribed;

-- name: WebhookMessageInsert :one
-- Stores a message once per (organizer, source_key). Returns no row when
-- the fact was stored before: the caller must then do nothing more.
INSERT INTO webhook_messages (id, organizer_id, event_type, payload, source_key, order_id, correlation_id, created_at)
VALUES (@id::uuid, @organizer_id::uuid, @event_type::text, @payload::bytea, @source_key::text,
        sqlc.narg('order_id')::uuid, @correlation_id::text, @created_at::timestamptz)
ON CONFLICT (organizer_id, source_key) DO NOTHING
RETURNING id;

-- name: WebhookDeliveryFanOut :execrows
-- Queues the message for every enabled endpoint of its organizer that
-- subscribes to its type, due at once.
INSERT INTO webhook_deliveries (id, message_id, endpoint_id, organizer_id, next_attempt_at)
SELECT gen_random_uuid(), @message_id::uuid, e.id, e.organizer_id, now()
FROM webhook_endpoints e
WHERE e.organizer_id = @organizer_id::uuid AND e.enabled
  AND (cardinality(e.event_types) = 0 OR @event_type::text = ANY(e.event_types))
ON CONFLICT (message_id, endpoint_id) DO NOTHING;

-- name: WebhookMessageList :many
-- Lists an organizer's messages, newest first, optionally of one type and
-- since a time, after the cursor (created_at, id) when one is given; with
-- status or endpoint_id, only messages that have a delivery (to that
-- endpoint) in that status. A delivery's status as the API states it:
-- succeeded; pending (not attempted since it was queued, replayed or
-- recovered); failed (pending again after a failed attempt: it will be
-- retried); dead (retries exhausted, a terminal answer, or stopped because
-- its endpoint was disabled — stored 'dead' or 'failed'). The same mapping
-- is in WebhookDeliveryListByMessages.
SELECT m.id, m.organizer_id, m.event_type, m.payload, m.created_at FROM webhook_messages m
WHERE m.organizer_id = @organizer_id::uuid
  AND (sqlc.narg('event_type')::text IS NULL OR m.event_type = sqlc.narg('event_type')::text)
  AND (sqlc.narg('since')::timestamptz IS NULL OR m.created_at >= sqlc.narg('since')::timestamptz)
  AND (sqlc.narg('before_created_at')::timestamptz IS NULL
       OR (m.created_at, m.id) < (sqlc.narg('before_created_at')::timestamptz, sqlc.narg('before_id')::uuid))
  AND ((sqlc.narg('status')::text IS NULL AND sqlc.narg('endpoint_id')::uuid IS NULL) OR EXISTS (
      SELECT 1 FROM webhook_deliveries d
      WHERE d.message_id = m.id
        AND (sqlc.narg('endpoint_id')::uuid IS NULL OR d.endpoint_id = sqlc.narg('endpoint_id')::uuid)
        AND (sqlc.narg('status')::text IS NULL
             OR CASE WHEN d.status = 'pending' AND d.attempts > d.retry_base THEN 'failed'
                     WHEN d.status IN ('failed', 'dead') THEN 'dead'
                     ELSE d.status END = sqlc.narg('status')::text)))
ORDER BY m.created_at DESC, m.id DESC
LIMIT @max_rows::int;

-- name: WebhookMessageGet :one
-- Returns one message of an organizer; another organizer's is not found.
SELECT id, organizer_id, event_type, payload, created_at FROM webhook_messages
WHERE id = @id::uuid AND organizer_id = @organizer_id::uuid;

-- name: WebhookAttemptListByMessage :many
-- Lists every attempt of one message of an organizer, oldest first.
SELECT a.id, a.delivery_id, a.message_id, a.endpoint_id, a.number, a.trigger, a.status_code,
       a.latency_ms, a.error_class, a.response_body, a.created_at
FROM webhook_attempts a
WHERE a.message_id = @message_id::uuid AND a.organizer_id = @organizer_id::uuid
ORDER BY a.id;

-- name: WebhookMessagePrune :execrows
-- Deletes up to max_rows messages created before cutoff, with their
-- attempts and (by cascade) their deliveries.
WITH old AS (
    SELECT id FROM webhook_messages WHERE created_at < @cutoff::timestamptz ORDER BY created_at LIMIT @max_rows::int
), attempts AS (
    DELETE FROM webhook_attempts WHERE message_id = ANY(ARRAY(SELECT id FROM old))
)
DELETE FROM webhook_messages WHERE id = ANY(ARRAY(SELECT id FROM old));
