-- name: SeatCopyFrom :copyfrom
INSERT INTO seats (id, event_id, position, section, label, price_minor, category_id)
VALUES (@id, @event_id, @position, @section, @label, @price_minor, @category_id);

-- name: SeatListByEvent :many
-- The seat map. A seat is sold when it has a live ticket, or a revoked one
-- whose refund kept it off sale, and held while an
-- unreleased hold row owns it and that hold is confirmed or not yet past
-- its expiry. A seat the organizer blocked (00036) shows as sold: off sale,
-- and not coming back as a held seat may. A seat's price is its
-- category's. The result is a hint: it may be stale by the time it is read.
SELECT s.id, s.section, s.label, c.price_minor, s.category_id, c.name AS category,
       (CASE
            WHEN t.seat_id IS NOT NULL OR b.seat_id IS NOT NULL THEN 'sold'
            WHEN h.id IS NOT NULL THEN 'held'
            ELSE 'available'
        END)::text AS status
FROM seats s
JOIN price_categories c ON c.id = s.category_id
LEFT JOIN tickets t ON t.seat_id = s.id AND (t.revoked_at IS NULL OR t.resale_at IS NULL)
LEFT JOIN seat_blocks b ON b.seat_id = s.id
LEFT JOIN hold_seats hs ON hs.seat_id = s.id AND hs.released_at IS NULL
LEFT JOIN holds h ON h.id = hs.hold_id
    AND (h.status = 'confirmed' OR (h.status = 'active' AND h.expires_at > now()))
WHERE s.event_id = @event_id::uuid
ORDER BY s.position;

-- name: SeatInventory :one
-- How many of the event's seats are held and sold (00023): held from the
-- unreleased hold_seats rows (hold_seat_active_uq, in proportion to the
-- seats held now), sold from the event's tickets that keep a seat
-- (ticket_sold_event_idx); never the seat map, and nothing the hold path
-- writes. Held counts an active hold past its expiry until the expirer
-- reclaims it. Blocked counts the seats the organizer holds back
-- (seat_blocks, 00036), which no hold or ticket owns. All counts are read
-- at one snapshot.
SELECT e.seat_count,
       (SELECT count(*) FROM hold_seats hs JOIN seats s ON s.id = hs.seat_id
        WHERE hs.released_at IS NULL AND s.event_id = e.id)::int AS held,
       (SELECT count(*) FROM tickets t
        WHERE t.event_id = e.id AND (t.revoked_at IS NULL OR t.resale_at IS NULL))::int AS sold,
       (SELECT count(*) FROM seat_blocks b WHERE b.event_id = e.id)::int AS blocked
FROM events e
WHERE e.id = @event_id::uuid;

-- name: SeatScoreSetByRow :many
-- Sets the score (00040) of every seat of the event in the named rows
-- (section and seat_row, item by item) and answers, for each seat set, the
-- item's 1-based number.
UPDATE seats s SET score = v.score
FROM (SELECT unnest(@sections::text[]) AS section, unnest(@seat_rows::text[]) AS seat_row,
             unnest(@scores::int[]) AS score, generate_subscripts(@scores::int[], 1) AS n) v
WHERE s.event_id = @event_id::uuid AND s.section = v.section AND s.seat_row = v.seat_row
RETURNING v.n::int AS item;

-- name: SeatScoreSetByID :many
-- Sets the score (00040) of the named seats of the event and answers, for
-- each seat set, the item's 1-based number.
UPDATE seats s SET score = v.score
FROM (SELECT unnest(@seat_ids::uuid[]) AS id, unnest(@scores::int[]) AS score,
             generate_subscripts(@scores::int[], 1) AS n) v
WHERE s.event_id = @event_id::uuid AND s.id = v.id
RETURNING v.n::int AS item;
