-- Organizer API keys (issue 19): long-lived credentials an organizer's
-- systems present instead of a bearer JWT. Only a SHA-256 of each key's
-- 32-byte random secret is stored: the key is shown once, when created,
-- and cannot be recovered from the database. A key lives in its
-- organizer's purchase cell, like everything else of that organizer, and
-- its row pins the organizer there (the row in organizers is ensured in the
-- same transaction).
--
-- revoked_at set: the key is refused from then on. Revoked keys are kept
-- so that listings still show them; nothing reads their hash again.

-- +goose Up
CREATE TABLE api_keys (
    id           uuid PRIMARY KEY,
    organizer_id uuid NOT NULL REFERENCES organizers (id),
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    prefix       text NOT NULL,
    secret_hash  bytea NOT NULL CHECK (length(secret_hash) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_keys_organizer_idx ON api_keys (organizer_id, created_at, id);
-- Writes from a fenced region are refused like every table's
-- (00010_region_fence.sql); reading a key to verify it is not a write, and
-- recording its last use is advisory.
CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION region_fence();

-- +goose Down
DROP TABLE api_keys;
