-- name: HoldReserve :one
-- The whole hold transaction in one statement; see hold_reserve in
-- migrations/00002_hold_reserve.sql for what it guarantees.
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
    @correlation_id::text, @outbox_id::uuid);

-- name: HoldGetByOrder :one
SELECT * FROM holds WHERE order_id = @order_id::uuid;
