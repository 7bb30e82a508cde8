-- What organizers need on the day (issue 17): their events' orders listed
-- and summed, and a record of who came in.
--
-- order_event_idx serves GET /v1/events/{eventId}/orders (newest first)
-- and the sales summary's orders by status. It costs the hold path one more
-- index entry per order. Migrations run in a transaction, so it is built
-- without CONCURRENTLY and blocks writes to orders while it builds: on a
-- large database, migrate outside an onsale.
--
-- check_ins records the first entry of each ticket. Its primary key is the
-- ticket: the first check-in of a ticket wins by the database's constraint
-- (INSERT … ON CONFLICT DO NOTHING), not by a read before the write, so two
-- scanners scanning one ticket at once admit it once. scanned_at is when
-- the scanner saw the ticket (an offline scanner's own clock, uploaded
-- later); recorded_at when the database took it.

-- +goose Up
CREATE INDEX order_event_idx ON orders (event_id, created_at, id);

CREATE TABLE check_ins (
    ticket_id   uuid PRIMARY KEY REFERENCES tickets (id),
    event_id    uuid NOT NULL REFERENCES events (id),
    gate        text NOT NULL,
    scanned_at  timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX check_in_event_gate_idx ON check_ins (event_id, gate);
-- Like every table, fenced: a process of an older region epoch cannot
-- write it (00010_region_fence.sql).
CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON check_ins
    FOR EACH STATEMENT EXECUTE FUNCTION region_fence();

-- +goose Down
DROP TABLE check_ins;
DROP INDEX order_event_idx;
