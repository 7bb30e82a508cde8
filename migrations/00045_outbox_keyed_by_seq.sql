-- The outbox is keyed by seq alone (issue 25). A row had two unique
-- indexes, outbox_pkey on the event id and outbox_seq_idx on seq, and
-- every event an order writes (about nine) paid for both at its insert
-- and again at its delete. Every reader already walks seq (the relay's
-- claim, the backlog and age reads, the audit); the only reader by id was
-- the relay's settle, which now names the rows it settles by seq
-- (functions/outbox_settle.sql). seq becomes the primary key, in the
-- place of outbox_seq_idx: one index per row.
--
-- The event id stays unique where it is kept for good: outbox_history's
-- key (aggregate_id, event_id) is written in the same statement as every
-- outbox row (OutboxInsertMany, hold_reserve), so a repeated id still
-- fails its insert. JetStream's message id is the event id, as before.
--
-- At upgrade. The old settle's signature (ids) is dropped: a relay of the
-- old version still running after this migration fails its settles, and
-- its rows are published again by a relay of this version once their
-- lease expires; JetStream drops the copies by their message id. Stop the
-- old relays before migrating to avoid the republishing.

-- +goose Up
DROP FUNCTION IF EXISTS outbox_settle(text, bigint, uuid[], uuid[], interval, uuid[], interval);
ALTER TABLE outbox DROP CONSTRAINT outbox_pkey;
DROP INDEX outbox_seq_idx;
ALTER TABLE outbox ADD CONSTRAINT outbox_pkey PRIMARY KEY (seq);

-- +goose Down
DROP FUNCTION IF EXISTS outbox_settle(text, bigint, bigint[], bigint[], interval, bigint[], interval);
ALTER TABLE outbox DROP CONSTRAINT outbox_pkey;
ALTER TABLE outbox ADD CONSTRAINT outbox_pkey PRIMARY KEY (id);
CREATE INDEX outbox_seq_idx ON outbox (seq);
