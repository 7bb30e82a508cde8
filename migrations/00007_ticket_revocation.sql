-- +goose Up
-- A refund revokes the order's tickets: the rows stay (a seat has at most
-- one ticket, ever, so a refunded ticketed seat is not sold again), and
-- revoked_at tells the owner's view and the door's revocation list that
-- the ticket no longer admits anyone. Its signed QR payload still
-- verifies offline, which is why scanners fetch the revocation list.
ALTER TABLE tickets ADD COLUMN revoked_at timestamptz;
CREATE INDEX ticket_revoked_idx ON tickets (revoked_at) WHERE revoked_at IS NOT NULL;

-- +goose Down
DROP INDEX ticket_revoked_idx;
ALTER TABLE tickets DROP COLUMN revoked_at;
