-- Seats held back by the organizer, and comps (issue 30 item 2).
--
-- A seat_blocks row takes its seat off sale: production kills, press,
-- sponsors. It is written and deleted only under the seat's row lock (the
-- lock every hold takes first, hold_reserve), after checking that no
-- unreleased hold and no live ticket owns the seat; hold_reserve, under
-- the same lock, counts a blocked seat as taken. So a block and a buyer's
-- hold never own one seat at once: whichever takes the seat lock first
-- wins, and the other sees it. Releasing a block deletes its row.
--
-- A comp or box office sale is an order the organizer issues: its channel
-- says which ('online' for every buyer's order), and external_reference
-- records what paid it outside Stripe (a box office receipt). It owns its
-- seats through a confirmed hold, with the same hold_seats rows and unique
-- indexes as a buyer's, and gets its tickets by the usual
-- TicketIssueRequested; it has no payments row.

-- +goose Up
CREATE TABLE seat_blocks (
    seat_id    uuid PRIMARY KEY REFERENCES seats (id),
    event_id   uuid NOT NULL REFERENCES events (id),
    reason     text NOT NULL CHECK (reason IN ('kill', 'production', 'press', 'sponsor', 'house', 'other')),
    note       text CHECK (length(note) <= 500),
    blocked_by uuid NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX seat_block_event_idx ON seat_blocks (event_id, seat_id);
-- Writes from a fenced region are refused like every table's
-- (00010_region_fence.sql).
CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON seat_blocks
    FOR EACH STATEMENT EXECUTE FUNCTION region_fence();

ALTER TABLE orders
    ADD COLUMN channel text NOT NULL DEFAULT 'online' CHECK (channel IN ('online', 'comp', 'box_office')),
    ADD COLUMN external_reference text CHECK (length(external_reference) BETWEEN 1 AND 200),
    ADD CONSTRAINT order_box_office_reference CHECK (channel <> 'box_office' OR external_reference IS NOT NULL);

-- +goose Down
ALTER TABLE orders DROP COLUMN external_reference, DROP COLUMN channel;
DROP TABLE seat_blocks;
