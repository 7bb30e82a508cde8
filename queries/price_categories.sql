-- name: PriceCategoryCopyFrom :copyfrom
INSERT INTO price_categories (id, event_id, position, name, price_minor, seat_limit)
VALUES (@id, @event_id, @position, @name, @price_minor, @seat_limit);

-- name: PriceCategoryListByEvent :many
-- The event's categories in the order the organizer listed them.
SELECT id, name, price_minor, seat_limit FROM price_categories
WHERE event_id = @event_id::uuid
ORDER BY position;
