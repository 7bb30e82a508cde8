-- Seat counts the waiting room can read on every admitter pass (issue 17,
-- "a waiting room that knows availability"). A seat is held while an
-- unreleased hold_seats row owns it and sold while a live ticket does (or
-- a revoked one whose refund kept it off sale); the two never overlap,
-- since ticketing releases the hold's seats in the transaction that
-- inserts the tickets.
--
-- Held seats are counted from the unreleased hold_seats rows through the
-- index that already exists for invariant 1 (hold_seat_active_uq): the
-- work is in proportion to the seats held right now, across the
-- database, and the hold path writes nothing more. (An index of the
-- unreleased rows by event cost about a seventh of the hold throughput in
-- `bench holds`: two more index entries in every hold's transaction.)
-- Sold seats grow with the onsale and are counted per event: tickets now
-- carry their seat's event, with a partial index of the tickets that keep
-- a seat, keyed by event and seat so that an onsale's inserts spread over
-- the index instead of piling onto one leaf page. Tickets are written by
-- the tickets worker, off the hold path.

-- +goose Up
ALTER TABLE tickets ADD COLUMN event_id uuid;
UPDATE tickets t SET event_id = s.event_id FROM seats s WHERE s.id = t.seat_id;
ALTER TABLE tickets ALTER COLUMN event_id SET NOT NULL;
CREATE INDEX ticket_sold_event_idx ON tickets (event_id, seat_id) WHERE revoked_at IS NULL OR resale_at IS NULL;

-- +goose Down
DROP INDEX ticket_sold_event_idx;
ALTER TABLE tickets DROP COLUMN event_id;
