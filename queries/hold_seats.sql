-- name: HoldSeatReclaimExpired :many
-- Run while the seats are locked (SeatLockForHold). Releases the seats of
-- active holds that are past their expiry, then returns the requested seats
-- that are still taken: owned by an unreleased hold or by a ticket.
-- Confirmed holds are never reclaimed, whatever their expiry says.
WITH reclaimed AS (
    UPDATE hold_seats hs
    SET released_at = now()
    FROM holds h
    WHERE h.id = hs.hold_id
      AND hs.seat_id = ANY(@seat_ids::uuid[])
      AND hs.released_at IS NULL
      AND h.status = 'active'
      AND h.expires_at <= now()
    RETURNING hs.seat_id
)
SELECT hs.seat_id::uuid AS seat_id
FROM hold_seats hs
WHERE hs.seat_id = ANY(@seat_ids::uuid[])
  AND hs.released_at IS NULL
  AND hs.seat_id NOT IN (SELECT seat_id FROM reclaimed)
UNION
SELECT t.seat_id::uuid AS seat_id
FROM tickets t
WHERE t.seat_id = ANY(@seat_ids::uuid[]);

-- name: HoldSeatListByHold :many
SELECT seat_id FROM hold_seats WHERE hold_id = @hold_id::uuid ORDER BY seat_id;
