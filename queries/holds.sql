-- name: HoldReserve :one
-- The whole hold transaction in one statement; see hold_reserve in
-- migrations/functions/hold_reserve.sql for what it guarantees.
-- Columns an outcome does not use are zero values, not NULL.
SELECT outcome::text AS outcome,
       coalesce(taken, '{}')::uuid[] AS taken,
       coalesce(expires_at, 'epoch')::timestamptz AS expires_at,
       coalesce(amount_minor, 0)::bigint AS amount_minor,
       coalesce(currency, '')::text AS currency,
       coalesce(key_request_hash, '')::bytea AS key_request_hash,
       coalesce(key_response, 'null')::jsonb AS key_response
FROM hold_reserve(
    @event_id::uuid, @seat_ids::uuid[], @user_id::uuid, @order_id::uuid, @hold_id::uuid,
    @hold_ttl::interval, @idempotency_key::text, @request_hash::bytea, @key_ttl::interval,
    @correlation_id::text, @outbox_id::uuid, @seat_limit::integer, @authorization_id::uuid,
    sqlc.narg(trace_parent)::text);

-- name: HoldGetByOrderForUpdate :one
-- Locks the order's hold; take the order's lock first.
SELECT * FROM holds WHERE order_id = @order_id::uuid FOR UPDATE;

-- name: HoldOwnsSeatsForPayment :one
-- Whether the hold still owns its seats by the database clock (active, not
-- past expires_at, none of its seats reclaimed by another hold), and
-- whether its order has the payment row of payment_intent_id: what an
-- authorization needs before it confirms the hold. Run it with the hold
-- and its seats locked, so the answer holds until commit.
SELECT (h.status = 'active'
        AND h.expires_at > now()
        AND NOT EXISTS (SELECT 1 FROM hold_seats hs WHERE hs.hold_id = h.id AND hs.released_at IS NOT NULL)
       )::bool AS owns_seats,
       EXISTS (SELECT 1 FROM payments p
               WHERE p.order_id = h.order_id AND p.payment_intent_id = @payment_intent_id::text) AS has_payment
FROM holds h
WHERE h.id = @id::uuid;

-- name: HoldTransition :exec
-- Moves the hold from one of from_statuses to to_status. A hold in none of
-- them fails the statement (expect_rows), as OrderTransition does.
WITH moved AS (
    UPDATE holds SET status = @to_status::text
    WHERE id = @id::uuid AND status = ANY(@from_statuses::text[])
    RETURNING 1)
SELECT expect_rows((SELECT count(*) FROM moved), 1, 'hold changed under its lock');

-- name: HoldClaimExpired :many
-- The expiry worker's claim: up to max_rows active holds past their expiry
-- by the database clock, oldest first, with their orders, both rows locked
-- until the batch commits. SKIP LOCKED passes over rows another worker or
-- a saga step holds, so concurrent workers take disjoint batches and the
-- claim never waits (and so never deadlocks). A confirmed hold is never
-- claimed, whatever its expires_at says. 'active' is purchase.HoldActive,
-- written out so that the partial index hold_expiry_idx (WHERE status =
-- 'active') serves the claim.
SELECT h.id, h.order_id, o.correlation_id,
       extract(epoch FROM now() - h.expires_at)::float8 AS delay_seconds,
       ARRAY(SELECT hs.seat_id FROM hold_seats hs WHERE hs.hold_id = h.id ORDER BY hs.seat_id)::uuid[] AS seat_ids
FROM holds h
JOIN orders o ON o.id = h.order_id
WHERE h.status = 'active' AND h.expires_at < now()
ORDER BY h.expires_at
LIMIT @max_rows::int
FOR UPDATE OF h, o SKIP LOCKED;

-- name: HoldTransitionMany :execrows
-- Moves the given (claimed, locked) holds from from_status to to_status:
-- the expiry worker's hold step. Returns how many moved.
UPDATE holds SET status = @to_status::text
WHERE id = ANY(@ids::uuid[]) AND status = @from_status::text;

-- name: HoldGraceForPayment :one
-- Extends the order's active hold, still owning its seats, because its
-- PaymentIntent is being confirmed: to at least grace from now, and never
-- past its expiry plus grace; once per hold (payment_grace_at). Returns
-- the hold's expiry, or no row when nothing was extended.
UPDATE holds
SET expires_at = greatest(expires_at, least(expires_at + @grace::interval, now() + @grace::interval)),
    payment_grace_at = now()
WHERE order_id = @order_id::uuid AND status = 'active' AND payment_grace_at IS NULL AND expires_at > now()
RETURNING expires_at;

-- name: HoldInsertConfirmed :exec
-- A hold confirmed from the start: an organizer's comp or box office
-- sale, whose seats are its own until ticketed (a confirmed hold is never
-- reclaimed, whatever its expiry says).
INSERT INTO holds (id, order_id, status, expires_at)
VALUES (@id::uuid, @order_id::uuid, 'confirmed', now());

-- name: HoldBestAvailable :one
-- A hold of quantity seats of a price category that the database picks,
-- in one statement; see hold_best_available in
-- migrations/functions/hold_best_available.sql for how it picks and what
-- it guarantees. Columns an outcome does not use are zero values, not
-- NULL; seats is the hold's seats as JSON (held or replay).
SELECT outcome::text AS outcome,
       coalesce(taken, '{}')::uuid[] AS taken,
       coalesce(expires_at, 'epoch')::timestamptz AS expires_at,
       coalesce(amount_minor, 0)::bigint AS amount_minor,
       coalesce(currency, '')::text AS currency,
       coalesce(key_request_hash, '')::bytea AS key_request_hash,
       coalesce(key_response, 'null')::jsonb AS key_response,
       coalesce(seats, '[]')::jsonb AS seats
FROM hold_best_available(
    @event_id::uuid, @category_id::uuid, @quantity::integer, @adjacent_only::boolean,
    @user_id::uuid, @order_id::uuid, @hold_id::uuid,
    @hold_ttl::interval, @idempotency_key::text, @request_hash::bytea, @key_ttl::interval,
    @correlation_id::text, @outbox_id::uuid, @seat_limit::integer, @authorization_id::uuid,
    sqlc.narg(trace_parent)::text);
