-- +goose Up
-- The signed QR payload of each ticket (tickets.Signer): fixed when the
-- ticket is issued, so every read shows the owner the same code. Not
-- secret: it is a bearer credential at the door only together with the
-- scanner's own checks, and it never leaves the owner's order view.
-- Nullable because tickets written before issuance was signed have none.
ALTER TABLE tickets ADD COLUMN qr_payload text;

-- +goose Down
ALTER TABLE tickets DROP COLUMN qr_payload;
