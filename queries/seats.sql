-- name: SeatCopyFrom :copyfrom
INSERT INTO seats (id, event_id, position, section, label, price_minor)
VALUES (@id, @event_id, @position, @section, @label, @price_minor);

-- name: SeatListByEvent :many
-- The seat map. A seat is sold when it has a live ticket, or a revoked one
-- whose refund kept it off sale, and held while an
-- unreleased hold row owns it and that hold is confirmed or not yet past
-- its expiry. The result is a hint: it may be stale by the time it is read.
SELECT s.id, s.section, s.label, s.price_minor,
       (CASE
            WHEN t.seat_id IS NOT NULL THEN 'sold'
            WHEN h.id IS NOT NULL THEN 'held'
            ELSE 'available'
        END)::text AS status
FROM seats s
LEFT JOIN tickets t ON t.seat_id = s.id AND (t.revoked_at IS NULL OR t.resale_at IS NULL)
LEFT JOIN hold_seats hs ON hs.seat_id = s.id AND hs.released_at IS NULL
LEFT JOIN holds h ON h.id = hs.hold_id
    AND (h.status = 'confirmed' OR (h.status = 'active' AND h.expires_at > now()))
WHERE s.event_id = @event_id::uuid
ORDER BY s.position;
