-- name: HoldSeatListByHold :many
SELECT seat_id FROM hold_seats WHERE hold_id = @hold_id::uuid ORDER BY seat_id;

-- name: HoldSeatLockSeats :exec
-- Locks, in seat id order, the seats the given holds still own. The hold
-- path takes these locks before it reclaims or takes seats, so releasing
-- under them never races (or deadlocks with) a concurrent hold. No caller
-- reads the rows: an :exec, so that it can be deferred (db.Deferring) and
-- go to the server with the statement that needs the locks.
-- The array goes through a scalar subquery so that every plan of the
-- statement sees it as a parameter: planned once per session, not per
-- call (docs/performance.md, "Planned once per session").
SELECT s.id
FROM seats s
WHERE s.id IN (
    SELECT hs.seat_id FROM hold_seats hs
    WHERE hs.hold_id = ANY((SELECT @hold_ids::uuid[])::uuid[]) AND hs.released_at IS NULL)
ORDER BY s.id
FOR UPDATE OF s;

-- name: HoldSeatReleaseByHolds :execrows
-- Gives back the seats the given holds still own. Seats already reclaimed
-- by a newer hold keep their released_at. The array goes through a
-- scalar subquery, as in HoldSeatLockSeats: planned once per session.
UPDATE hold_seats SET released_at = now()
WHERE hold_id = ANY((SELECT @hold_ids::uuid[])::uuid[]) AND released_at IS NULL;

-- name: HoldSeatReclaimExpired :exec
-- Releases, under the seat locks, the given seats' rows of active holds
-- past their expiry, as hold_reserve does before it decides; confirmed
-- holds are never reclaimed.
UPDATE hold_seats hs SET released_at = now()
FROM holds h
WHERE h.id = hs.hold_id
  AND hs.seat_id = ANY (@seat_ids::uuid[])
  AND hs.released_at IS NULL
  AND h.status = 'active'
  AND h.expires_at <= now();

-- name: HoldSeatInsertMany :exec
INSERT INTO hold_seats (hold_id, seat_id)
SELECT @hold_id::uuid, seat FROM unnest(@seat_ids::uuid[]) AS seat;

-- name: HoldSeatsOfHold :many
-- The seats of a hold, released or not, in seat map order: what a replayed
-- best-available hold answers with.
SELECT s.id, s.section, s.label
FROM hold_seats hs JOIN seats s ON s.id = hs.seat_id
WHERE hs.hold_id = @hold_id::uuid
ORDER BY s.position;
