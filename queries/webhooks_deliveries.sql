-- name: WebhookDeliveryClaim :many
-- Leases due deliveries to dispatcher_id, fairly across tenants: the
-- organizers with an enabled endpoint are visited in random order and each
-- gives at most per_organizer of its due deliveries (the organizers in
-- squeezed at most their squeezed_limits), oldest due first, max_rows in
-- all. The lease (lease_expires_at) keeps other dispatchers
-- off a delivery until it runs out: a delivery whose dispatcher dies is
-- due again then. The claim changes no indexed column, so it is a HOT
-- update; leased rows stay in the due index and are skipped by the lease
-- filter. SKIP LOCKED keeps dispatchers from waiting on each other. Each
-- row comes with its message's type and bytes and its endpoint's settings
-- (secrets sealed, as stored).
WITH picked AS (
    SELECT d.id
    FROM (SELECT organizer_id FROM webhook_endpoints WHERE enabled GROUP BY organizer_id ORDER BY random()) o
    CROSS JOIN LATERAL (
        SELECT dd.id FROM webhook_deliveries dd
        WHERE dd.organizer_id = o.organizer_id AND dd.status = 'pending' AND dd.next_attempt_at <= now()
          AND (dd.lease_expires_at IS NULL OR dd.lease_expires_at < now())
        ORDER BY dd.next_attempt_at
        LIMIT coalesce((@squeezed_limits::int[])[array_position(@squeezed::uuid[], o.organizer_id)], @per_organizer::int)
        FOR UPDATE SKIP LOCKED
    ) d
    LIMIT @max_rows::int
)
UPDATE webhook_deliveries d
SET claimed_by = @dispatcher_id::text, lease_expires_at = now() + @lease::interval
FROM webhook_messages m, webhook_endpoints e
WHERE d.id = ANY(ARRAY(SELECT id FROM picked)) AND m.id = d.message_id AND e.id = d.endpoint_id
RETURNING d.id, d.message_id, d.endpoint_id, d.organizer_id, d.attempts, d.retry_base, d.next_trigger,
          d.acknowledged_at, m.event_type, m.payload, m.created_at AS message_created_at, m.order_id, m.correlation_id, m.trace_parent,
          e.url, e.secret, e.previous_secret, e.previous_secret_expires_at, e.rate_limit_per_second,
          e.max_concurrency, e.circuit_state, e.circuit_open_until, e.enabled, e.payload_version, now()::timestamptz AS claimed_at;

-- name: WebhookDeliveryRelease :exec
-- Gives leased deliveries back without an attempt (throttled, circuit
-- open): each becomes due again after its delay in milliseconds. Per-row
-- values are looked up by array position: a join with unnest lets the
-- planner hash the whole table or rescan the arrays per row.
UPDATE webhook_deliveries d
SET next_attempt_at = now() + make_interval(secs => (@delays_ms::bigint[])[array_position(@ids::uuid[], d.id)] / 1000.0),
    claimed_by = NULL, lease_expires_at = NULL
WHERE d.id = ANY(@ids::uuid[]) AND d.claimed_by = @dispatcher_id::text AND d.status = 'pending';

-- name: WebhookDeliverySucceed :exec
-- Records one successful attempt of each delivery, and when the endpoint
-- first acknowledged it. Only deliveries dispatcher_id still holds are
-- changed: one replayed meanwhile belongs to the replay.
UPDATE webhook_deliveries d
SET attempts = d.attempts + 1, status = 'succeeded', next_attempt_at = NULL, last_error = NULL,
    acknowledged_at = coalesce(d.acknowledged_at, now()),
    claimed_by = NULL, lease_expires_at = NULL, updated_at = now()
WHERE d.id = ANY(@ids::uuid[]) AND d.claimed_by = @dispatcher_id::text;

-- name: WebhookDeliveryComplete :exec
-- Records the outcome of one failed attempt per delivery: attempts + 1,
-- the new status (pending, dead), and for a pending one when it is due
-- again (delay in ms) with trigger 'retry'. Only deliveries dispatcher_id
-- still holds are changed. Per-row values are looked up by array
-- position, as in WebhookDeliveryRelease.
UPDATE webhook_deliveries d
SET attempts = d.attempts + 1,
    status = (@statuses::text[])[array_position(@ids::uuid[], d.id)],
    next_attempt_at = CASE WHEN (@statuses::text[])[array_position(@ids::uuid[], d.id)] = 'pending'
        THEN now() + make_interval(secs => (@delays_ms::bigint[])[array_position(@ids::uuid[], d.id)] / 1000.0) END,
    next_trigger = CASE WHEN (@statuses::text[])[array_position(@ids::uuid[], d.id)] = 'pending'
        THEN 'retry' ELSE d.next_trigger END,
    last_error = nullif((@last_errors::text[])[array_position(@ids::uuid[], d.id)], ''),
    claimed_by = NULL,
    lease_expires_at = NULL,
    updated_at = now()
WHERE d.id = ANY(@ids::uuid[]) AND d.claimed_by = @dispatcher_id::text;

-- name: WebhookFlushAsyncCommit :exec
-- Lets the current transaction commit without waiting for its WAL flush
-- (see Dispatcher.flush for why losing it is safe).
SELECT set_config('synchronous_commit', 'off', true);

-- name: WebhookAttemptInsert :copyfrom
-- Records attempts; call it in the transaction of WebhookDeliveryComplete.
INSERT INTO webhook_attempts (delivery_id, message_id, endpoint_id, organizer_id, number, trigger, status_code,
                              latency_ms, error_class, response_body, created_at)
VALUES (@delivery_id, @message_id, @endpoint_id, @organizer_id, @number, @trigger, @status_code,
        @latency_ms, @error_class, @response_body, @created_at);

-- name: WebhookDeliveryFailPendingByEndpoint :execrows
-- Stops the pending deliveries of a disabled endpoint: status failed, kept
-- for recover and replay.
UPDATE webhook_deliveries SET status = 'failed', claimed_by = NULL, lease_expires_at = NULL, next_attempt_at = NULL, updated_at = now(),
    last_error = coalesce(last_error, 'endpoint disabled')
WHERE endpoint_id = @endpoint_id::uuid AND status = 'pending';

-- name: WebhookDeliveryRecover :one
-- Queues again every failed, dead or needs_review delivery of an
-- organizer's endpoint created in [since, until) (until NULL: up to now),
-- with trigger 'recover' and a fresh retry schedule, and records the
-- request (who, why, the window, how many it queued) in the same
-- statement. A delivery is queued by one of two concurrent recovers only:
-- the second finds it pending. Returns how many deliveries it queued.
WITH queued AS (
    UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = now(), next_trigger = 'recover',
        retry_base = attempts, claimed_by = NULL, lease_expires_at = NULL, updated_at = now()
    WHERE endpoint_id = @endpoint_id::uuid AND organizer_id = @organizer_id::uuid
      AND status IN ('failed', 'dead', 'needs_review') AND created_at >= @since::timestamptz
      AND (sqlc.narg('until')::timestamptz IS NULL OR created_at < sqlc.narg('until')::timestamptz)
    RETURNING 1
)
INSERT INTO webhook_redeliveries (id, organizer_id, kind, endpoint_id, since, until, requested_by, reason, deliveries)
SELECT @id::uuid, @organizer_id::uuid, 'recover', @endpoint_id::uuid, @since::timestamptz,
       sqlc.narg('until')::timestamptz, @requested_by::text, @reason::text, (SELECT count(*) FROM queued)
RETURNING deliveries;

-- name: WebhookDeliveryReplay :one
-- Queues a message again for every enabled endpoint it was delivered to,
-- or for one enabled endpoint of the same organizer (creating its delivery if it had
-- none): due at once, trigger 'replay', a fresh retry schedule, whatever
-- the delivery's status (needs_review included). The message and its id
-- do not change. Records the request (who, why, how many it queued) in the
-- same statement. Returns how many deliveries it queued.
WITH queued AS (
    INSERT INTO webhook_deliveries (id, message_id, endpoint_id, organizer_id, next_attempt_at, next_trigger)
    SELECT gen_random_uuid(), m.id, e.id, m.organizer_id, now(), 'replay'
    FROM webhook_messages m
    JOIN webhook_endpoints e ON e.organizer_id = m.organizer_id
    WHERE m.id = @message_id::uuid AND m.organizer_id = @organizer_id::uuid AND e.enabled
      AND (e.id = sqlc.narg('endpoint_id')::uuid
           OR (sqlc.narg('endpoint_id')::uuid IS NULL
               AND EXISTS (SELECT 1 FROM webhook_deliveries x WHERE x.message_id = m.id AND x.endpoint_id = e.id)))
    ON CONFLICT (message_id, endpoint_id) DO UPDATE
    SET status = 'pending', next_attempt_at = now(), next_trigger = 'replay',
        retry_base = webhook_deliveries.attempts, claimed_by = NULL, lease_expires_at = NULL, updated_at = now()
    RETURNING 1
)
INSERT INTO webhook_redeliveries (id, organizer_id, kind, message_id, endpoint_id, requested_by, reason, deliveries)
SELECT @id::uuid, @organizer_id::uuid, 'replay', @message_id::uuid, sqlc.narg('endpoint_id')::uuid,
       @requested_by::text, @reason::text, (SELECT count(*) FROM queued)
RETURNING deliveries;

-- name: WebhookDeliveryStats :one
-- The age of the oldest pending delivery, by the database clock (0 when
-- none is pending), and the number of due ones (capped at 100,000).
SELECT coalesce(extract(epoch FROM now() - (
           SELECT created_at FROM webhook_deliveries WHERE status = 'pending' ORDER BY created_at LIMIT 1)), 0)::float8
           AS oldest_pending_age_seconds;

-- name: WebhookDeliveryReviewCount :one
-- How many deliveries wait in needs_review (capped at 100,000), for the
-- gauge.
SELECT count(*)::bigint FROM (
    SELECT 1 FROM webhook_deliveries WHERE status = 'needs_review' LIMIT 100000
) r;

-- name: WebhookNoticeInsert :execrows
-- Stores an operational notice (endpoint.disabled, delivery.exhausted,
-- delivery.needs_review) of
-- an organizer and queues it, due at once, for every enabled endpoint of
-- that organizer, except the one the notice is about, that lists the
-- notice's type in its filter (an empty filter does not take notices).
-- Nothing is stored when no endpoint takes it, nor a second time for a
-- source_key stored before. Returns the deliveries queued.
WITH subscribers AS (
    SELECT e.id FROM webhook_endpoints e
    WHERE e.organizer_id = @organizer_id::uuid AND e.enabled AND e.id <> @about_endpoint_id::uuid
      AND @event_type::text = ANY(e.event_types)
), msg AS (
    INSERT INTO webhook_messages (id, organizer_id, event_type, payload, source_key, created_at)
    SELECT @id::uuid, @organizer_id::uuid, @event_type::text, @payload::bytea, @source_key::text, @created_at::timestamptz
    WHERE EXISTS (SELECT 1 FROM subscribers)
    ON CONFLICT (organizer_id, source_key) DO NOTHING
    RETURNING id
)
INSERT INTO webhook_deliveries (id, message_id, endpoint_id, organizer_id, next_attempt_at)
SELECT gen_random_uuid(), msg.id, s.id, @organizer_id::uuid, now()
FROM msg CROSS JOIN subscribers s;

-- name: WebhookTestInsert :one
-- Stores a webhook.test message of an organizer and queues it for one of
-- its enabled endpoints only, due at once, whatever the endpoint's filter.
-- No row when the endpoint is not the organizer's or is disabled.
WITH target AS (
    SELECT e.id FROM webhook_endpoints e
    WHERE e.id = @endpoint_id::uuid AND e.organizer_id = @organizer_id::uuid AND e.enabled
), msg AS (
    INSERT INTO webhook_messages (id, organizer_id, event_type, payload, source_key, created_at)
    SELECT @id::uuid, @organizer_id::uuid, 'webhook.test', @payload::bytea, 'webhook.test:' || (@id::uuid)::text,
           @created_at::timestamptz
    FROM target
    RETURNING id, created_at
), delivery AS (
    INSERT INTO webhook_deliveries (id, message_id, endpoint_id, organizer_id, next_attempt_at)
    SELECT gen_random_uuid(), msg.id, target.id, @organizer_id::uuid, now() FROM msg CROSS JOIN target
)
SELECT id, created_at FROM msg;

-- name: WebhookDeliveryListByMessages :many
-- Lists the deliveries of an organizer's messages, with each one's status
-- as the API states it (see WebhookMessageList for the mapping).
SELECT d.message_id, d.endpoint_id,
       (CASE WHEN d.status = 'pending' AND d.attempts > d.retry_base THEN 'failed'
             WHEN d.status IN ('failed', 'dead') THEN 'dead'
             ELSE d.status END)::text AS status,
       d.attempts, d.last_error, d.next_attempt_at, d.acknowledged_at, d.updated_at
FROM webhook_deliveries d
WHERE d.message_id = ANY(@message_ids::uuid[]) AND d.organizer_id = @organizer_id::uuid
ORDER BY d.message_id, d.endpoint_id;
