-- name: OnsaleGet :one
-- The event's onsale settings; no row means the defaults (open, no cap, no
-- seat limit).
SELECT * FROM onsales WHERE event_id = @event_id::uuid;

-- name: OnsaleGetForUpdate :one
-- Locks the event's onsale settings for a read-modify-write.
SELECT * FROM onsales WHERE event_id = @event_id::uuid FOR UPDATE;

-- name: OnsaleUpsert :one
-- Writes the event's whole onsale settings.
INSERT INTO onsales (event_id, opens_at, paused, max_rate, seat_limit)
VALUES (@event_id::uuid, sqlc.narg('opens_at')::timestamptz, @paused::bool,
        sqlc.narg('max_rate')::int, sqlc.narg('seat_limit')::int)
ON CONFLICT (event_id) DO UPDATE
SET opens_at = excluded.opens_at,
    paused = excluded.paused,
    max_rate = excluded.max_rate,
    seat_limit = excluded.seat_limit,
    updated_at = now()
RETURNING *;

-- name: OnsaleBuyerSeatCount :one
-- Seats user_id holds (an unreleased seat of a live or confirmed hold) or
-- owns (a ticket of a ticketed order) in event_id, not counting the seats in
-- exclude: the seats of the hold being asked for, so that a retried hold
-- does not count against itself. Walks order_user_idx.
SELECT count(DISTINCT seat_id)::bigint AS seats
FROM (
    SELECT hs.seat_id
    FROM orders o
    JOIN holds h ON h.order_id = o.id
    JOIN hold_seats hs ON hs.hold_id = h.id
    WHERE o.user_id = @user_id::uuid AND o.event_id = @event_id::uuid
      AND hs.released_at IS NULL
      AND (h.status = 'confirmed' OR (h.status = 'active' AND h.expires_at > now()))
    UNION ALL
    SELECT t.seat_id
    FROM orders o
    JOIN tickets t ON t.order_id = o.id
    WHERE o.user_id = @user_id::uuid AND o.event_id = @event_id::uuid AND o.status = 'ticketed'
) AS mine
WHERE NOT (seat_id = ANY(@exclude::uuid[]));

-- name: OnsaleSignals :one
-- What the release controller reads from the cell's database: the age of
-- the oldest event not yet on the bus (walking outbox_seq_idx from its
-- head, as OutboxStats does) and the number of live holds (walking the
-- partial hold_expiry_idx).
SELECT coalesce(extract(epoch FROM now() - (SELECT created_at FROM outbox ORDER BY seq LIMIT 1)), 0)::float8 AS oldest_outbox_age_seconds,
       (SELECT count(*) FROM holds WHERE status = 'active' AND expires_at > now())::bigint AS active_holds;
