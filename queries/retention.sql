-- name: RetentionPruneInbox :execrows
-- Deletes up to max_rows inbox rows processed before before.
DELETE FROM inbox WHERE (consumer, event_id) IN (
    SELECT consumer, event_id FROM inbox WHERE processed_at < @before::timestamptz LIMIT @max_rows::int);

-- name: RetentionPruneOutboxHistory :execrows
-- Deletes up to max_rows outbox_history rows of events that occurred
-- before before.
DELETE FROM outbox_history WHERE (aggregate_id, event_id) IN (
    SELECT aggregate_id, event_id FROM outbox_history WHERE occurred_at < @before::timestamptz LIMIT @max_rows::int);

-- name: RetentionPruneStripeEvents :execrows
-- Deletes up to max_rows Stripe event ids received before before.
DELETE FROM stripe_events WHERE id IN (
    SELECT id FROM stripe_events WHERE received_at < @before::timestamptz LIMIT @max_rows::int);

-- name: RetentionPruneIdempotencyKeys :execrows
-- Deletes up to max_rows idempotency keys past their expiry: a request
-- with the key after that is a new request.
DELETE FROM idempotency_keys WHERE (user_id, key) IN (
    SELECT user_id, key FROM idempotency_keys WHERE expires_at < now() LIMIT @max_rows::int);

-- name: RetentionPruneIdempotentRequests :execrows
-- Deletes up to max_rows keys of idempotent requests past their expiry,
-- with the answers kept for their retries (sealed secrets included).
DELETE FROM idempotent_requests WHERE (principal, key) IN (
    SELECT principal, key FROM idempotent_requests WHERE expires_at < now() LIMIT @max_rows::int);

-- name: RetentionClearClientSecrets :execrows
-- Clears the client secret of up to max_rows payments whose order no
-- longer awaits payment (statuses not in awaiting): nobody may confirm
-- them any more, so nothing needs the secret.
UPDATE payments SET client_secret = NULL
WHERE order_id IN (
    SELECT p.order_id FROM payments p JOIN orders o ON o.id = p.order_id
    WHERE p.client_secret IS NOT NULL AND NOT (o.status = ANY(@awaiting::text[]))
    LIMIT @max_rows::int);
