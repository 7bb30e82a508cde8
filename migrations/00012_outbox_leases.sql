-- +goose Up
-- The relay leases whole batches instead of rows. A claim used to update
-- every claimed row (claimed_by, claim_expires_at): a new version of each
-- ~600-byte row, the relay's largest database cost. Now a claim reads its
-- rows and writes one lease covering their seq range; other relays skip
-- rows inside live leases, and a dead relay's lease simply expires.
--
-- A lease may cover rows that are not in its batch (a row committed late
-- with a lower seq, or one waiting out a retry backoff): they stay hidden
-- until the lease is deleted after its batch settles (within AckTimeout),
-- or expires. Rows are never lost: only an acknowledged row is deleted.
CREATE TABLE outbox_leases (
    relay_id   text NOT NULL,
    first_seq  bigint NOT NULL,
    last_seq   bigint NOT NULL CHECK (last_seq >= first_seq),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (relay_id, first_seq)
);
CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON outbox_leases
    FOR EACH STATEMENT EXECUTE FUNCTION region_fence();

-- Rows are no longer claimed one by one; claim_expires_at stays as the
-- time before which a row that failed to publish is not retried.
ALTER TABLE outbox DROP COLUMN claimed_by;
ALTER TABLE outbox RENAME COLUMN claim_expires_at TO retry_at;
-- Rows are written once and deleted once now: pack them densely again
-- (00003 left half of each page free for the per-row claim updates).
ALTER TABLE outbox RESET (fillfactor);

-- +goose Down
ALTER TABLE outbox SET (fillfactor = 50);
ALTER TABLE outbox RENAME COLUMN retry_at TO claim_expires_at;
ALTER TABLE outbox ADD COLUMN claimed_by text;
DROP TABLE outbox_leases;
