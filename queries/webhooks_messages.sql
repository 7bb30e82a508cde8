-- name: WebhookFanOutSubjects :many
-- Returns, in one statement for a whole batch of the fan-out, what it
-- needs to know about each of the orders that exists: its event, the
-- organizer that owns the event, its status and amount, and what that
-- organizer's enabled endpoints subscribe to: all_types when one of them
-- has an empty filter (every event type), and the types the filters of
-- the others name. An organizer with no enabled endpoint comes back with
-- all_types false and no types. The array goes through a scalar
-- subquery so that every plan of the statement sees it as a parameter:
-- planned once per session, not per batch (docs/performance.md, "Planned
-- once per session").
SELECT o.id AS order_id, o.event_id, e.organizer_id, o.status, o.amount_minor, o.currency,
       EXISTS (
           SELECT 1 FROM webhook_endpoints w
           WHERE w.organizer_id = e.organizer_id AND w.enabled AND cardinality(w.event_types) = 0
       ) AS all_types,
       ARRAY(
           SELECT DISTINCT t.event_type FROM webhook_endpoints w, unnest(w.event_types) AS t(event_type)
           WHERE w.organizer_id = e.organizer_id AND w.enabled
       )::text[] AS event_types
FROM orders o JOIN events e ON e.id = o.event_id
WHERE o.id = ANY ((SELECT @order_ids::uuid[])::uuid[]);

-- name: WebhookFanOutStore :many
-- Stores a batch of facts in one statement, given as parallel arrays of
-- one length, no two with the same (organizer, source_key): each becomes
-- a message once per (organizer, source_key) — a fact stored before is
-- skipped — and only while an enabled endpoint of its organizer
-- subscribes to its type; each message stored gets one pending delivery,
-- due at once, per enabled endpoint of its organizer that subscribes to
-- its type (the endpoints as they are at this statement). Returns the
-- messages stored, each with its number of deliveries. trace_parents is
-- NULL when tracing is off (a shorter array's missing elements are NULL).
WITH fact AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@organizer_ids::uuid[]) AS organizer_id,
           unnest(@event_types::text[]) AS event_type, unnest(@payloads::bytea[]) AS payload,
           unnest(@source_keys::text[]) AS source_key, unnest(@order_ids::uuid[]) AS order_id,
           unnest(@correlation_ids::text[]) AS correlation_id, unnest(@created_ats::timestamptz[]) AS created_at,
           unnest(sqlc.narg(trace_parents)::text[]) AS trace_parent
), message AS (
    INSERT INTO webhook_messages (id, organizer_id, event_type, payload, source_key, order_id, correlation_id, created_at, trace_parent)
    SELECT f.id, f.organizer_id, f.event_type, f.payload, f.source_key, f.order_id, f.correlation_id, f.created_at,
           nullif(f.trace_parent, '')
    FROM fact f
    WHERE EXISTS (
        SELECT 1 FROM webhook_endpoints e
        WHERE e.organizer_id = f.organizer_id AND e.enabled
          AND (cardinality(e.event_types) = 0 OR f.event_type = ANY (e.event_types))
    )
    ON CONFLICT (organizer_id, source_key) DO NOTHING
    RETURNING id, organizer_id, event_type
), delivery AS (
    INSERT INTO webhook_deliveries (id, message_id, endpoint_id, organizer_id, next_attempt_at)
    SELECT gen_random_uuid(), m.id, e.id, e.organizer_id, now()
    FROM message m
    JOIN webhook_endpoints e ON e.organizer_id = m.organizer_id AND e.enabled
     AND (cardinality(e.event_types) = 0 OR m.event_type = ANY (e.event_types))
    RETURNING message_id
)
SELECT m.id, (SELECT count(*) FROM delivery d WHERE d.message_id = m.id)::int AS deliveries
FROM message m;

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
-- retried); needs_review (a terminal answer: it waits for a recover or a
-- replay); dead (retries exhausted, 410, or stopped because its endpoint
-- was disabled — stored 'dead' or 'failed'). The same mapping
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
-- attempts and (by cascade) their deliveries, and up to max_rows records
-- of replays and recovers made before cutoff.
WITH old AS (
    SELECT id FROM webhook_messages WHERE created_at < @cutoff::timestamptz ORDER BY created_at LIMIT @max_rows::int
), attempts AS (
    DELETE FROM webhook_attempts WHERE message_id = ANY(ARRAY(SELECT id FROM old))
), redeliveries AS (
    DELETE FROM webhook_redeliveries WHERE id = ANY(ARRAY(
        SELECT id FROM webhook_redeliveries WHERE created_at < @cutoff::timestamptz ORDER BY created_at LIMIT @max_rows::int))
)
DELETE FROM webhook_messages WHERE id = ANY(ARRAY(SELECT id FROM old));

-- name: WebhookSubscriberCount :one
-- How many enabled endpoints of the organizer subscribe to the type.
SELECT count(*)::int FROM webhook_endpoints e
WHERE e.organizer_id = @organizer_id::uuid AND e.enabled
  AND (cardinality(e.event_types) = 0 OR @event_type::text = ANY (e.event_types));
