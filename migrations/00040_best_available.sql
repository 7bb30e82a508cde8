-- Best available (issue 30 item 4): a buyer asks for N seats of a price
-- category and hold_best_available (functions/) picks them. It needs, per
-- seat, where it sits in its row and how good the organizer says it is.
--
-- seat_row and seat_number are read from the seat's label, "<row>-<n>"
-- (the labels catalog.Section generates, "A-1"), as generated columns:
-- they follow the label, need nothing from the writers of seats, and a
-- label of another form leaves both NULL (such a seat is never adjacent to
-- another; best available can still pick it on its own). Two seats are
-- adjacent when they share section and seat_row and their numbers differ
-- by one.
--
-- score is the organizer's (PUT .../seat-scores, per seat or per row):
-- higher is better. Every seat starts at 0, so an event whose organizer
-- set nothing is picked in seat map order (position: sections in their
-- order, row A first, then seat 1 onwards), the order its seats were laid
-- out in; the same order breaks ties between equal scores.
--
-- seat_category_pick_idx serves the pick: the seats of one category of an
-- event, best first; seat_row_idx the seats of the rows it looks at.

-- +goose Up
ALTER TABLE seats
    ADD COLUMN score integer NOT NULL DEFAULT 0 CHECK (score BETWEEN -1000000 AND 1000000),
    ADD COLUMN seat_row text GENERATED ALWAYS AS (substring(label FROM '^(.+)-[0-9]{1,6}$')) STORED,
    ADD COLUMN seat_number integer GENERATED ALWAYS AS (substring(label FROM '^.+-([0-9]{1,6})$')::integer) STORED;
CREATE INDEX seat_category_pick_idx ON seats (event_id, category_id, score DESC, position);
CREATE INDEX seat_row_idx ON seats (event_id, section, seat_row);

-- +goose Down
DROP INDEX seat_row_idx;
DROP INDEX seat_category_pick_idx;
ALTER TABLE seats DROP COLUMN seat_number, DROP COLUMN seat_row, DROP COLUMN score;
