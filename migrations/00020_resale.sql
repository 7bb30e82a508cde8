-- Seats that come back (issue 17). Ticket uniqueness now covers live
-- tickets only: a seat has at most one ticket that is not revoked
-- (invariant 1), and a refund of a ticketed order may put its seats back
-- on sale. tickets.resale_at is set when the refund that revoked the
-- ticket released its seat for resale (the organizer's resell: true); a
-- revoked ticket without it keeps its seat off sale, as every refund did
-- before. A revoked ticket is refused at the door either way. The indexes
-- are built inside the migration's transaction (no CONCURRENTLY): on a
-- large database, migrate outside an onsale.

-- +goose Up
ALTER TABLE tickets ADD COLUMN resale_at timestamptz;
CREATE UNIQUE INDEX ticket_seat_live_uq ON tickets (seat_id) WHERE revoked_at IS NULL;
CREATE INDEX ticket_seat_idx ON tickets (seat_id);
DROP INDEX ticket_seat_uq;

-- +goose Down
-- Only where no seat was sold twice.
CREATE UNIQUE INDEX ticket_seat_uq ON tickets (seat_id);
DROP INDEX ticket_seat_idx;
DROP INDEX ticket_seat_live_uq;
ALTER TABLE tickets DROP COLUMN resale_at;
