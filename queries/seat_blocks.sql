-- name: SeatLockForClaim :many
-- Locks the event's given seats in id order, as hold_reserve does (so a
-- block or a comp and a hold over the same seats take turns and cannot
-- deadlock), and returns each with its category's price. Seats not of the
-- event are missing from the result. The seats are found by key only (the
-- event is a filter, IS NOT DISTINCT FROM being no index condition), as in
-- hold_reserve: a new event unknown to the statistics would otherwise be
-- read whole through an index on event_id.
SELECT s.id, c.price_minor
FROM seats s JOIN price_categories c ON c.id = s.category_id
WHERE s.id = ANY (@seat_ids::uuid[]) AND s.event_id IS NOT DISTINCT FROM @event_id::uuid
ORDER BY s.id
FOR UPDATE OF s;

-- name: SeatOwnedList :many
-- Of the given (locked) seats, those owned by an unreleased hold row or a
-- live ticket (or a revoked one kept off sale), as hold_reserve decides;
-- the caller first reclaims seats of expired holds (HoldSeatReclaimExpired).
SELECT DISTINCT x.seat_id FROM (
    SELECT hs.seat_id FROM hold_seats hs WHERE hs.seat_id = ANY (@seat_ids::uuid[]) AND hs.released_at IS NULL
    UNION ALL
    SELECT tk.seat_id FROM tickets tk
    WHERE tk.seat_id = ANY (@seat_ids::uuid[]) AND (tk.revoked_at IS NULL OR tk.resale_at IS NULL)
    UNION ALL
    -- A seat offered to a waitlist buyer (00041) is theirs until the offer
    -- ends: the organizer can neither block nor issue it meanwhile.
    SELECT b.seat_id FROM seat_blocks b
    WHERE b.seat_id = ANY (@seat_ids::uuid[]) AND b.waitlist_entry_id IS NOT NULL
) x
ORDER BY x.seat_id;

-- name: SeatBlockUpsert :exec
-- Blocks the given (locked, unowned) seats, or changes the reason of a
-- block they already have. A block asked again as it is stays untouched
-- (its time included), so a retried request answers as the first did.
INSERT INTO seat_blocks (seat_id, event_id, reason, note, blocked_by)
SELECT seat, @event_id::uuid, @reason::text, sqlc.narg(note)::text, @blocked_by::uuid
FROM unnest(@seat_ids::uuid[]) AS seat
ON CONFLICT (seat_id) DO UPDATE SET reason = EXCLUDED.reason, note = EXCLUDED.note,
    blocked_by = EXCLUDED.blocked_by, created_at = now()
WHERE (seat_blocks.reason, seat_blocks.note, seat_blocks.blocked_by)
    IS DISTINCT FROM (EXCLUDED.reason, EXCLUDED.note, EXCLUDED.blocked_by);

-- name: SeatBlockDelete :many
-- Releases the event's given blocks (the organizer's: a waitlist offer's
-- reservation is not theirs to release); returns the seats that were
-- blocked.
DELETE FROM seat_blocks
WHERE event_id = @event_id::uuid AND seat_id = ANY (@seat_ids::uuid[]) AND waitlist_entry_id IS NULL
RETURNING seat_id;

-- name: SeatBlockListByEvent :many
-- The event's blocked seats in seat map order.
SELECT b.seat_id, s.section, s.label, b.reason, b.note, b.created_at
FROM seat_blocks b JOIN seats s ON s.id = b.seat_id
WHERE b.event_id = @event_id::uuid AND b.waitlist_entry_id IS NULL
ORDER BY s.position;

-- name: SeatFreeInCategory :many
-- Up to @max seats of the event's category that nobody holds or owns and
-- that are not blocked, in seat map order: the candidates of a waitlist
-- offer, read without locks (the caller locks them and checks again).
-- A seat of an active hold past its expiry counts as free, as
-- hold_reserve would reclaim it. @skip are seats to leave out.
SELECT s.id FROM seats s
WHERE s.event_id = @event_id::uuid AND s.category_id = @category_id::uuid
  AND NOT (s.id = ANY (@skip::uuid[]))
  AND NOT EXISTS (SELECT 1 FROM hold_seats hs JOIN holds h ON h.id = hs.hold_id
                  WHERE hs.seat_id = s.id AND hs.released_at IS NULL
                    AND (h.status <> 'active' OR h.expires_at > now()))
  AND NOT EXISTS (SELECT 1 FROM tickets tk WHERE tk.seat_id = s.id AND (tk.revoked_at IS NULL OR tk.resale_at IS NULL))
  AND NOT EXISTS (SELECT 1 FROM seat_blocks b WHERE b.seat_id = s.id)
ORDER BY s.position
LIMIT @max::int;

-- name: SeatBlockedList :many
-- Of the given (locked) seats, those blocked, by the organizer or for a
-- waitlist offer.
SELECT seat_id FROM seat_blocks WHERE seat_id = ANY (@seat_ids::uuid[]) ORDER BY seat_id;

-- name: SeatBlockInsertOffer :exec
-- Reserves the given (locked, free) seats for a waitlist entry's offer.
INSERT INTO seat_blocks (seat_id, event_id, reason, blocked_by, waitlist_entry_id)
SELECT seat, @event_id::uuid, 'waitlist', @user_id::uuid, @entry_id::uuid
FROM unnest(@seat_ids::uuid[]) AS seat;

-- name: SeatBlockDeleteOffer :many
-- Ends a waitlist offer's reservation; returns its seats.
DELETE FROM seat_blocks WHERE waitlist_entry_id = @entry_id::uuid
RETURNING seat_id;

-- name: SeatBlockListOffer :many
-- The seats reserved for a waitlist entry's offer, in id order.
SELECT seat_id FROM seat_blocks WHERE waitlist_entry_id = @entry_id::uuid ORDER BY seat_id;
