-- name: WebhookEndpointLockOrganizer :exec
-- Serialises the creates of one organizer's endpoints until the
-- transaction ends, so that counting them and inserting one is atomic.
SELECT pg_advisory_xact_lock(hashtextextended('webhook_endpoints:' || (@organizer_id::uuid)::text, 0));

-- name: WebhookEndpointCountByOrganizer :one
-- Counts an organizer's endpoints, enabled or not.
SELECT count(*)::int AS endpoints FROM webhook_endpoints WHERE organizer_id = @organizer_id::uuid;

-- name: WebhookEndpointInsert :one
-- Creates an endpoint for an organizer; secret is already sealed
-- (webhooks.Keyring). A url_key another endpoint of the organizer has is a
-- unique violation.
INSERT INTO webhook_endpoints (id, organizer_id, url, url_key, description, event_types, enabled, disabled_reason,
                               rate_limit_per_second, max_concurrency, secret, disabled_at, payload_version)
VALUES (@id::uuid, @organizer_id::uuid, @url::text, @url_key::text, @description::text, @event_types::text[], @enabled::boolean,
        CASE WHEN @enabled::boolean THEN NULL ELSE 'user' END,
        sqlc.narg('rate_limit_per_second')::int, @max_concurrency::int, @secret::text,
        CASE WHEN @enabled::boolean THEN NULL ELSE now() END, @payload_version::smallint)
RETURNING *;

-- name: WebhookEndpointList :many
-- Lists an organizer's endpoints, oldest first, after the cursor
-- (created_at, id) when one is given.
SELECT * FROM webhook_endpoints
WHERE organizer_id = @organizer_id::uuid
  AND (sqlc.narg('after_created_at')::timestamptz IS NULL
       OR (created_at, id) > (sqlc.narg('after_created_at')::timestamptz, sqlc.narg('after_id')::uuid))
ORDER BY created_at, id
LIMIT @max_rows::int;

-- name: WebhookEndpointGet :one
-- Returns one endpoint of an organizer; another organizer's is not found.
SELECT * FROM webhook_endpoints WHERE id = @id::uuid AND organizer_id = @organizer_id::uuid;

-- name: WebhookEndpointUpdate :one
-- Changes the given fields of an organizer's endpoint (NULL: unchanged);
-- url and url_key change together, and a url_key another endpoint of the
-- organizer has is a unique violation. Enabling clears the disabled reason, the failure count and the circuit;
-- disabling records the reason 'user'. set_rate_limit distinguishes "set
-- to unlimited" (true with a NULL rate) from "unchanged".
UPDATE webhook_endpoints SET
    url = coalesce(sqlc.narg('url')::text, url),
    url_key = CASE WHEN sqlc.narg('url')::text IS NULL THEN url_key ELSE sqlc.narg('url_key')::text END,
    description = coalesce(sqlc.narg('description')::text, description),
    event_types = coalesce(sqlc.narg('event_types')::text[], event_types),
    max_concurrency = coalesce(sqlc.narg('max_concurrency')::int, max_concurrency),
    payload_version = coalesce(sqlc.narg('payload_version')::smallint, payload_version),
    rate_limit_per_second = CASE WHEN @set_rate_limit::boolean THEN sqlc.narg('rate_limit_per_second')::int
                                 ELSE rate_limit_per_second END,
    enabled = coalesce(sqlc.narg('enabled')::boolean, enabled),
    disabled_reason = CASE
        WHEN sqlc.narg('enabled')::boolean IS NULL THEN disabled_reason
        WHEN sqlc.narg('enabled')::boolean THEN NULL
        WHEN enabled THEN 'user'
        ELSE disabled_reason END,
    disabled_at = CASE
        WHEN sqlc.narg('enabled')::boolean IS NULL THEN disabled_at
        WHEN sqlc.narg('enabled')::boolean THEN NULL
        WHEN enabled THEN now()
        ELSE disabled_at END,
    consecutive_failures = CASE WHEN sqlc.narg('enabled')::boolean AND NOT enabled THEN 0 ELSE consecutive_failures END,
    failing_since = CASE WHEN sqlc.narg('enabled')::boolean AND NOT enabled THEN NULL ELSE failing_since END,
    circuit_state = CASE WHEN sqlc.narg('enabled')::boolean AND NOT enabled THEN 'closed' ELSE circuit_state END,
    circuit_open_until = CASE WHEN sqlc.narg('enabled')::boolean AND NOT enabled THEN NULL ELSE circuit_open_until END,
    updated_at = now()
WHERE id = @id::uuid AND organizer_id = @organizer_id::uuid
RETURNING *;

-- name: WebhookEndpointDelete :execrows
-- Deletes an organizer's endpoint with its deliveries (attempts stay with
-- their messages).
DELETE FROM webhook_endpoints WHERE id = @id::uuid AND organizer_id = @organizer_id::uuid;

-- name: WebhookEndpointRotateSecret :one
-- Makes secret the endpoint's secret; the one it replaces keeps signing
-- beside it until now() + overlap.
UPDATE webhook_endpoints SET
    previous_secret = secret,
    previous_secret_expires_at = now() + @overlap::interval,
    secret = @secret::text,
    updated_at = now()
WHERE id = @id::uuid AND organizer_id = @organizer_id::uuid
RETURNING *;

-- name: WebhookEndpointDisable :one
-- Disables an enabled endpoint for reason ('gone' or 'failing') and
-- returns what a notice of it says. No row for one already disabled: each
-- disabling is returned once.
UPDATE webhook_endpoints SET enabled = false, disabled_reason = @reason::text, disabled_at = now(), updated_at = now()
WHERE id = @id::uuid AND enabled
RETURNING organizer_id, disabled_at::timestamptz AS disabled_at, failing_since;

-- name: WebhookEndpointRecordSuccess :exec
-- Records that the endpoints answered with success: failures forgotten,
-- circuit closed, last_success_at now. A healthy endpoint's row is written
-- at most every 10 seconds: last_success_at is exact to within that.
UPDATE webhook_endpoints SET consecutive_failures = 0, failing_since = NULL,
    circuit_state = 'closed', circuit_open_until = NULL, last_success_at = now()
WHERE id = ANY(@ids::uuid[])
  AND (consecutive_failures <> 0 OR circuit_state <> 'closed'
       OR last_success_at IS NULL OR last_success_at < now() - interval '10 seconds');

-- name: WebhookEndpointRecordFailures :one
-- Adds failures to the endpoint's run of consecutive failures. Returns
-- the circuit's state, the new run, when the run began and whether the
-- endpoint is enabled. Whether the run opens the circuit is the breaker's
-- rule (domain/webhooks/breaker.go), recorded by WebhookEndpointOpenCircuit
-- in the same transaction, under the row lock this update took: the runs
-- of dispatchers recording at once add up.
UPDATE webhook_endpoints SET
    consecutive_failures = consecutive_failures + @failures::int,
    failing_since = coalesce(failing_since, now())
WHERE id = @id::uuid
RETURNING circuit_state, consecutive_failures, failing_since::timestamptz AS failing_since, enabled;

-- name: WebhookEndpointOpenCircuit :exec
-- Opens the endpoint's circuit (again) until now() + open_for, counting
-- an opening from closed in circuit_opened_count.
UPDATE webhook_endpoints SET
    circuit_state = 'open',
    circuit_open_until = now() + @open_for::interval,
    circuit_opened_count = circuit_opened_count + CASE WHEN circuit_state = 'closed' THEN 1 ELSE 0 END
WHERE id = @id::uuid;

-- name: WebhookEndpointCircuitCounts :one
-- Counts endpoints by circuit state: closed, open, and half-open (open but
-- past its cooldown, so probes may go out); and disabled ones.
SELECT count(*) FILTER (WHERE enabled AND circuit_state = 'closed')::bigint AS closed,
       count(*) FILTER (WHERE enabled AND circuit_state = 'open' AND circuit_open_until > now())::bigint AS open,
       count(*) FILTER (WHERE enabled AND circuit_state = 'open' AND circuit_open_until <= now())::bigint AS half_open,
       count(*) FILTER (WHERE NOT enabled)::bigint AS disabled
FROM webhook_endpoints;

-- name: WebhookEndpointSecretsToReseal :many
-- Locks up to max_rows endpoints after the id cursor whose secret, or
-- previous secret, is not sealed under the key whose stored values start
-- with prefix (v1:<current key id>:), legacy plaintext included; endpoints
-- another transaction holds are skipped for this pass.
SELECT id, secret, previous_secret, previous_secret_expires_at FROM webhook_endpoints
WHERE id > @after::uuid
  AND (NOT starts_with(secret, @prefix::text) OR NOT starts_with(previous_secret, @prefix::text))
ORDER BY id
LIMIT @max_rows::int
FOR UPDATE SKIP LOCKED;

-- name: WebhookEndpointReseal :exec
-- Stores an endpoint's secrets sealed anew (same plaintext, current key);
-- a NULL previous_secret drops the previous secret and its expiry. Call it
-- in the transaction of WebhookEndpointSecretsToReseal.
UPDATE webhook_endpoints SET
    secret = @secret::text,
    previous_secret = sqlc.narg('previous_secret')::text,
    previous_secret_expires_at = CASE WHEN sqlc.narg('previous_secret')::text IS NULL THEN NULL
                                      ELSE previous_secret_expires_at END
WHERE id = @id::uuid;
