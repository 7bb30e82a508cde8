-- name: OutboxInsert :exec
-- Writes one event to the outbox; call it in the transaction of the state
-- change the event describes.
INSERT INTO outbox (id, subject, event_type, aggregate_id, envelope)
VALUES (@id::uuid, @subject::text, @event_type::text, @aggregate_id::uuid, @envelope::json);

-- name: OutboxClaimBatch :many
-- Leases up to max_rows rows, oldest first, to relay_id until
-- now() + lease. Rows under another relay's live lease, or waiting out a
-- retry backoff, are skipped, and SKIP LOCKED keeps concurrent relays from
-- waiting on each other. The lease commits with this statement, so no
-- transaction stays open while the relay publishes. RETURNING order is
-- unspecified; sort by seq.
--
-- The picked ids go through an array, not a join, so that every plan,
-- including the generic plan a prepared statement settles on after five
-- runs, finds the rows through outbox_pkey: a join let that plan hash the
-- whole outbox, whose heap keeps the pages of deleted rows until vacuum.
UPDATE outbox
SET claimed_by = @relay_id::text,
    claim_expires_at = now() + @lease::interval
WHERE id = ANY(ARRAY(
    SELECT id
    FROM outbox
    WHERE claim_expires_at IS NULL OR claim_expires_at < now()
    ORDER BY seq
    LIMIT @max_rows::int
    FOR UPDATE SKIP LOCKED
))
RETURNING id, seq::bigint AS seq, subject, envelope;

-- name: OutboxDeletePublished :many
-- Deletes rows once JetStream has acknowledged them, but only those relay_id
-- still holds: a row whose lease passed to another relay is that relay's to
-- delete (it republishes, and JetStream drops the duplicate). Returns, per
-- row, the seconds from its commit to now: the event-delivery latency.
DELETE FROM outbox
WHERE id = ANY(@ids::uuid[]) AND claimed_by = @relay_id::text
RETURNING extract(epoch FROM clock_timestamp() - created_at)::float8 AS latency_seconds;

-- name: OutboxRelease :execrows
-- Gives rows relay_id holds but did not get acknowledged back to every
-- relay after retry_after (zero: at once), instead of waiting out the lease.
UPDATE outbox
SET claimed_by = NULL, claim_expires_at = now() + @retry_after::interval
WHERE id = ANY(@ids::uuid[]) AND claimed_by = @relay_id::text;

-- name: OutboxStats :one
-- Counts unpublished rows (every row in the outbox is unpublished; the
-- count stops at 100,000) and the age of the oldest one, by the database
-- clock. Both walk outbox_seq_idx from its head instead of scanning the
-- heap, which keeps deleted rows' pages until vacuum: the first walk over
-- entries of deleted rows marks them dead, so later walks cost about the
-- backlog.
SELECT (SELECT count(*) FROM (SELECT seq FROM outbox ORDER BY seq LIMIT 100000) AS head)::bigint AS backlog,
       coalesce(extract(epoch FROM now() - (SELECT created_at FROM outbox ORDER BY seq LIMIT 1)), 0)::float8 AS oldest_age_seconds;
