-- The sandbox payment provider's state (payments.Sandbox). Nothing but the
-- sandbox reads or writes these tables.

-- name: SandboxIntentInsert :one
INSERT INTO sandbox_payment_intents (id, client_secret, amount, currency, status, metadata)
VALUES (@id::text, @client_secret::text, @amount::bigint, @currency::text, @status::text, @metadata::jsonb)
RETURNING *;

-- name: SandboxIntentGet :one
SELECT * FROM sandbox_payment_intents WHERE id = @id::text;

-- name: SandboxIntentGetForUpdate :one
-- Locks the intent for the rest of the transaction, so that operations on
-- one intent (capture, cancel, refund, the buyer's authorize) serialise
-- and each sees the state the previous one left.
SELECT * FROM sandbox_payment_intents WHERE id = @id::text FOR UPDATE;

-- name: SandboxIntentUpdate :one
UPDATE sandbox_payment_intents
SET status = @status::text,
    amount_capturable = @amount_capturable::bigint,
    amount_received = @amount_received::bigint,
    latest_charge = sqlc.narg('latest_charge')::text,
    last_payment_error = sqlc.narg('last_payment_error')::jsonb,
    canceled_at = sqlc.narg('canceled_at')::timestamptz,
    updated_at = now()
WHERE id = @id::text
RETURNING *;

-- name: SandboxIntentList :many
-- Intents created in [created_from, created_to), newest first, as Stripe
-- lists them.
SELECT * FROM sandbox_payment_intents
WHERE created_at >= @created_from::timestamptz AND created_at < @created_to::timestamptz
ORDER BY created_at DESC, id DESC;

-- name: SandboxRefundInsert :one
INSERT INTO sandbox_refunds (id, payment_intent_id, amount, currency)
VALUES (@id::text, @payment_intent_id::text, @amount::bigint, @currency::text)
RETURNING *;

-- name: SandboxRefundTotal :one
-- What the intent's charge has had refunded so far.
SELECT COALESCE(sum(amount), 0)::bigint AS refunded FROM sandbox_refunds WHERE payment_intent_id = @payment_intent_id::text;

-- name: SandboxIdempotencyKeyClaim :one
-- Claims key for this transaction's request. Returns false when the key is
-- already bound: the caller must replay its stored response instead of
-- performing anything. While another transaction holds an uncommitted
-- claim on key, this waits for it to end.
WITH claimed AS (
    INSERT INTO sandbox_idempotency_keys (key, operation, request_hash)
    VALUES (@key::text, @operation::text, @request_hash::bytea)
    ON CONFLICT (key) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM claimed) AS claimed;

-- name: SandboxIdempotencyKeyGet :one
SELECT * FROM sandbox_idempotency_keys WHERE key = @key::text;

-- name: SandboxIdempotencyKeySetResponse :exec
UPDATE sandbox_idempotency_keys SET response = @response::jsonb WHERE key = @key::text;

-- name: SandboxRequestInsert :exec
INSERT INTO sandbox_requests (operation, payment_intent_id, idempotency_key, outcome)
VALUES (@operation::text, sqlc.narg('payment_intent_id')::text, sqlc.narg('idempotency_key')::text, @outcome::text);

-- name: SandboxRequestCount :one
-- Counts the requests for one operation on one intent by outcome.
SELECT count(*)::bigint AS requests,
       count(*) FILTER (WHERE outcome = 'performed')::bigint AS performed,
       count(*) FILTER (WHERE outcome = 'replayed')::bigint AS replayed,
       count(*) FILTER (WHERE outcome = 'rejected')::bigint AS rejected
FROM sandbox_requests
WHERE payment_intent_id = @payment_intent_id::text AND operation = @operation::text;

-- name: SandboxWebhookInsert :exec
-- Queues one webhook event; call it in the transaction of the change the
-- event describes.
INSERT INTO sandbox_webhook_deliveries (event_id, event_type, payment_intent_id, payload)
VALUES (@event_id::text, @event_type::text, @payment_intent_id::text, @payload::json);

-- name: SandboxWebhookClaim :many
-- Leases up to max_rows due, undelivered events to the caller until
-- now() + lease and counts the attempt. SKIP LOCKED keeps senders in
-- several processes from waiting on each other; an event whose sender died
-- is due again when its lease ends. RETURNING order is unspecified; sort
-- by seq (and keep one intent's events in that order).
UPDATE sandbox_webhook_deliveries AS d
SET next_attempt_at = now() + @lease::interval,
    attempts = d.attempts + 1,
    last_attempt_at = now()
FROM (
    SELECT event_id
    FROM sandbox_webhook_deliveries
    WHERE delivered_at IS NULL AND next_attempt_at <= now()
    ORDER BY seq
    LIMIT @max_rows::int
    FOR UPDATE SKIP LOCKED
) AS due
WHERE d.event_id = due.event_id
RETURNING d.event_id, d.seq::bigint AS seq, d.event_type, d.payment_intent_id, d.payload, d.attempts;

-- name: SandboxWebhookSettleDelivered :exec
-- Records the events of one batch the receiver answered 2xx to.
UPDATE sandbox_webhook_deliveries
SET delivered_at = coalesce(delivered_at, now()), last_error = NULL
WHERE event_id = ANY(@event_ids::text[]);

-- name: SandboxWebhookSettleRetries :exec
-- Records the failed attempts of one batch, each with its last error and
-- its backoff in milliseconds, after which the event is due again.
UPDATE sandbox_webhook_deliveries AS d
SET next_attempt_at = now() + f.backoff_ms * interval '1 millisecond', last_error = f.last_error
FROM (SELECT unnest(@event_ids::text[]) AS event_id, unnest(@backoff_ms::bigint[]) AS backoff_ms,
             unnest(@last_errors::text[]) AS last_error) AS f
WHERE d.event_id = f.event_id AND d.delivered_at IS NULL;

-- name: SandboxWebhookListByIntent :many
-- The events queued for one intent, oldest first.
SELECT event_id, event_type, attempts, delivered_at
FROM sandbox_webhook_deliveries
WHERE payment_intent_id = @payment_intent_id::text
ORDER BY seq;
