-- Seat counts the waiting room can read on every admitter pass (issue 17,
-- "a waiting room that knows availability"). A seat is held while an
-- unreleased hold_seats row owns it and sold while a live ticket does (or
-- a revoked one whose refund kept it off sale); the two never overlap,
-- since ticketing releases the hold's seats in the transaction that
-- inserts the tickets. Both rows now carry their seat's event, and a
-- partial index per table holds only the rows that count, so an event's
-- held and sold seats are counted from index entries of those seats alone,
-- with no seat-map scan and no counter row that every hold would update.
-- The hold path writes the event id it already has; nothing else changes.

-- +goose Up
ALTER TABLE hold_seats ADD COLUMN event_id uuid;
UPDATE hold_seats hs SET event_id = s.event_id FROM seats s WHERE s.id = hs.seat_id;
ALTER TABLE hold_seats ALTER COLUMN event_id SET NOT NULL;
CREATE INDEX hold_seat_open_event_idx ON hold_seats (event_id) WHERE released_at IS NULL;

ALTER TABLE tickets ADD COLUMN event_id uuid;
UPDATE tickets t SET event_id = s.event_id FROM seats s WHERE s.id = t.seat_id;
ALTER TABLE tickets ALTER COLUMN event_id SET NOT NULL;
CREATE INDEX ticket_sold_event_idx ON tickets (event_id) WHERE revoked_at IS NULL OR resale_at IS NULL;

-- +goose Down
DROP INDEX ticket_sold_event_idx;
ALTER TABLE tickets DROP COLUMN event_id;
DROP INDEX hold_seat_open_event_idx;
ALTER TABLE hold_seats DROP COLUMN event_id;
