-- Price categories (issue 30 item 1): an event's seats belong to
-- categories ("Floor", "Balcony front"), each with its price in the
-- event's currency and, optionally, its own limit of seats per buyer. A
-- seat's price is its category's: hold_reserve prices a hold from the
-- categories of its seats, in the hold's one statement. seats.price_minor
-- stays as the copy written with the seat (categories are created with
-- their event and never repriced, so the two agree; the audit checks it)
-- for the readers that price a ticket from its seat.
--
-- Existing events get one category per section, priced as today: a
-- section whose seats have one price becomes a category of that name; a
-- section of explicit seats at several prices becomes one category per
-- price, named "<section> · <price>".
--
-- seats.category_id has no foreign key, for the reason event_id has none
-- (00001): seats are written only with their event and its categories, in
-- one transaction, and a per-row check would double the time to create a
-- 100,000-seat event. The audit checks every seat has its event's category.

-- +goose Up
CREATE TABLE price_categories (
    id          uuid PRIMARY KEY,
    event_id    uuid NOT NULL REFERENCES events (id),
    position    integer NOT NULL,
    name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 130),
    price_minor bigint NOT NULL CHECK (price_minor >= 0),
    -- Seats of the category one buyer may hold or own at once; 0: no limit
    -- of the category's own (the onsale's limit for the event still holds).
    seat_limit  integer NOT NULL DEFAULT 0 CHECK (seat_limit >= 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_id, name)
);
CREATE INDEX price_category_event_idx ON price_categories (event_id, position);
-- Writes from a fenced region are refused like every table's
-- (00010_region_fence.sql).
CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON price_categories
    FOR EACH STATEMENT EXECUTE FUNCTION region_fence();

ALTER TABLE seats ADD COLUMN category_id uuid;

CREATE TEMPORARY TABLE category_backfill ON COMMIT DROP AS
SELECT gen_random_uuid() AS id, event_id, section, price_minor,
       (row_number() OVER (PARTITION BY event_id ORDER BY first_position) - 1)::integer AS position,
       CASE WHEN count(*) OVER (PARTITION BY event_id, section) > 1
            THEN section || ' · ' || price_minor
            ELSE section END AS name
FROM (
    SELECT event_id, section, price_minor, min(position) AS first_position
    FROM seats GROUP BY event_id, section, price_minor
) g;

INSERT INTO price_categories (id, event_id, position, name, price_minor)
SELECT id, event_id, position, name, price_minor FROM category_backfill;

UPDATE seats s SET category_id = b.id
FROM category_backfill b
WHERE b.event_id = s.event_id AND b.section = s.section AND b.price_minor = s.price_minor;

ALTER TABLE seats ALTER COLUMN category_id SET NOT NULL;

-- +goose Down
ALTER TABLE seats DROP COLUMN category_id;
DROP TABLE price_categories;
