-- name: HoldCreate :one
-- Writes a whole hold in one statement, so the purchase path pays one round
-- trip for it: the order, the hold, its seats, the idempotency key with the
-- response, and the HoldCreated outbox row. Run it only while the seats are
-- locked and known to be free (SeatLockForHold, HoldSeatReclaimExpired).
--
-- key_claimed is false when a concurrent request with the same user and
-- idempotency key committed first; the caller must then roll back and
-- answer from that request's key.
WITH new_order AS (
    INSERT INTO orders (id, user_id, event_id, status, amount_minor, currency, correlation_id)
    VALUES (@order_id::uuid, @user_id::uuid, @event_id::uuid, 'pending_payment',
            @amount_minor::bigint, @currency::text, @correlation_id::text)
    RETURNING id
), new_hold AS (
    INSERT INTO holds (id, order_id, status, expires_at)
    SELECT @hold_id::uuid, id, 'active', @expires_at::timestamptz FROM new_order
    RETURNING id
), new_hold_seats AS (
    INSERT INTO hold_seats (hold_id, seat_id)
    SELECT new_hold.id, seat.id
    FROM new_hold, unnest(@seat_ids::uuid[]) AS seat(id)
), claimed_key AS (
    INSERT INTO idempotency_keys (user_id, key, request_hash, order_id, response, expires_at)
    SELECT @user_id::uuid, @idempotency_key::text, @request_hash::bytea, id,
           @response::jsonb, @key_expires_at::timestamptz
    FROM new_order
    ON CONFLICT (user_id, key) DO NOTHING
    RETURNING order_id
), new_outbox AS (
    INSERT INTO outbox (id, subject, event_type, aggregate_id, envelope)
    SELECT @outbox_id::uuid, @outbox_subject::text, @outbox_event_type::text, id, @outbox_envelope::json
    FROM new_order
)
SELECT EXISTS (SELECT 1 FROM claimed_key) AS key_claimed;

-- name: HoldGetByOrder :one
SELECT * FROM holds WHERE order_id = @order_id::uuid;
