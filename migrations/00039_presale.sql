-- Onsale phases and presale codes (issue 30 item 3).
--
-- An onsale_phases row is one phase of an event's onsale: from opens_at
-- until the next phase opens, it decides who may join the waiting room
-- and hold (a presale admits only buyers who redeemed one of its codes)
-- and which price categories may be held (category_ids; empty: all). The
-- phase in force is the latest one opened; before the first opens, the
-- first one (the pre-queue waits for it). An event without phases sells
-- as before.
--
-- A presale_codes row is one access code of a presale phase. Only the
-- SHA-256 of the normalized code is stored (the organizer is shown the
-- code once, as with API keys). uses counts the buyers it admitted: a
-- redemption is a conditional UPDATE (uses < max_uses) under the row's
-- lock, so concurrent buyers cannot take more than max_uses, and the
-- CHECK is the last guard. max_seats bounds the seats all the code's
-- buyers together hold or own in the event, checked in hold_reserve under
-- a lock of the code.
--
-- A presale_redemptions row says a buyer redeemed a code for a phase: one
-- per (phase, buyer), written in the transaction that takes the use, so
-- the same buyer joining again does not use the code twice. hold_reserve
-- reads it to admit the buyer's holds during the phase.

-- +goose Up
CREATE TABLE onsale_phases (
    id           uuid PRIMARY KEY,
    event_id     uuid NOT NULL REFERENCES events (id),
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    opens_at     timestamptz NOT NULL,
    presale      boolean NOT NULL,
    category_ids uuid[] NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_id, name),
    UNIQUE (event_id, opens_at)
);
CREATE TABLE presale_codes (
    id         uuid PRIMARY KEY,
    event_id   uuid NOT NULL REFERENCES events (id),
    phase_id   uuid NOT NULL REFERENCES onsale_phases (id),
    code_hash  bytea NOT NULL,
    max_uses   integer NOT NULL CHECK (max_uses BETWEEN 1 AND 1000000),
    uses       integer NOT NULL DEFAULT 0 CHECK (uses >= 0 AND uses <= max_uses),
    max_seats  integer NOT NULL CHECK (max_seats BETWEEN 1 AND 1000),
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (phase_id, code_hash)
);
CREATE TABLE presale_redemptions (
    phase_id   uuid NOT NULL REFERENCES onsale_phases (id),
    user_id    uuid NOT NULL,
    code_id    uuid NOT NULL REFERENCES presale_codes (id),
    event_id   uuid NOT NULL REFERENCES events (id),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (phase_id, user_id)
);
CREATE INDEX presale_redemption_code_idx ON presale_redemptions (code_id);
-- Writes from a fenced region are refused like every table's
-- (00010_region_fence.sql).
CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON onsale_phases
    FOR EACH STATEMENT EXECUTE FUNCTION region_fence();
CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON presale_codes
    FOR EACH STATEMENT EXECUTE FUNCTION region_fence();
CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON presale_redemptions
    FOR EACH STATEMENT EXECUTE FUNCTION region_fence();

-- +goose Down
DROP TABLE presale_redemptions;
DROP TABLE presale_codes;
DROP TABLE onsale_phases;
