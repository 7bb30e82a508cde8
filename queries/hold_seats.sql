-- name: HoldSeatListByHold :many
SELECT seat_id FROM hold_seats WHERE hold_id = @hold_id::uuid ORDER BY seat_id;

-- name: HoldSeatLockSeats :exec
-- Locks, in seat id order, the seats the given holds still own. The hold
-- path takes these locks before it reclaims or takes seats, so releasing
-- under them never races (or deadlocks with) a concurrent hold. No caller
-- reads the rows: an :exec, so that it can be deferred (db.Deferring) and
-- go to the server with the statement that needs the locks.
SELECT s.id
FROM seats s
WHERE s.id IN (
    SELECT hs.seat_id FROM hold_seats hs
    WHERE hs.hold_id = ANY(@hold_ids::uuid[]) AND hs.released_at IS NULL)
ORDER BY s.id
FOR UPDATE OF s;

-- name: HoldSeatReleaseByHolds :execrows
-- Gives back the seats the given holds still own. Seats already reclaimed
-- by a newer hold keep their released_at.
UPDATE hold_seats SET released_at = now()
WHERE hold_id = ANY(@hold_ids::uuid[]) AND released_at IS NULL;
