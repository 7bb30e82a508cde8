-- name: OnsaleGet :one
-- The event's onsale settings; no row means the defaults (open, no cap, no
-- seat limit).
SELECT * FROM onsales WHERE event_id = @event_id::uuid;

-- name: OnsaleGetForUpdate :one
-- Locks the event's onsale settings for a read-modify-write.
SELECT * FROM onsales WHERE event_id = @event_id::uuid FOR UPDATE;

-- name: OnsaleUpsert :one
-- Writes the event's whole onsale settings.
INSERT INTO onsales (event_id, opens_at, paused, max_rate, seat_limit, payment_attempts, hold_ttl_seconds)
VALUES (@event_id::uuid, sqlc.narg('opens_at')::timestamptz, @paused::bool,
        sqlc.narg('max_rate')::int, sqlc.narg('seat_limit')::int, sqlc.narg('payment_attempts')::int,
        sqlc.narg('hold_ttl_seconds')::int)
ON CONFLICT (event_id) DO UPDATE
SET opens_at = excluded.opens_at,
    paused = excluded.paused,
    max_rate = excluded.max_rate,
    seat_limit = excluded.seat_limit,
    payment_attempts = excluded.payment_attempts,
    hold_ttl_seconds = excluded.hold_ttl_seconds,
    updated_at = now()
RETURNING *;

-- name: OnsaleSignals :one
-- What the release controller reads from the cell's database: the age of
-- the oldest event not yet on the bus (walking outbox_pkey (seq) from its
-- head, as OutboxStats does); the number of live holds and how long past
-- its expiry the oldest hold still active is, the expiry worker's delay
-- (both walking the partial hold_expiry_idx); and the outbox rows waiting
-- out a retry after a failed publish, up to 1,000 (the partial
-- outbox_retry_idx). The server's own statistics (lock waits, deadlocks)
-- are read beside it (waitingroom.CellSignals).
SELECT coalesce(extract(epoch FROM now() - (SELECT created_at FROM outbox ORDER BY seq LIMIT 1)), 0)::float8 AS oldest_outbox_age_seconds,
       (SELECT count(*) FROM holds WHERE status = 'active' AND expires_at > now())::bigint AS active_holds,
       coalesce(extract(epoch FROM now() - (SELECT min(expires_at) FROM holds WHERE status = 'active' AND expires_at <= now())), 0)::float8 AS expiry_delay_seconds,
       (SELECT count(*) FROM (SELECT 1 FROM outbox WHERE retry_at > now() LIMIT 1000) AS retrying)::bigint AS publish_retries;
