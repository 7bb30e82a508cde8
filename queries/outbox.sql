-- name: OutboxInsert :exec
-- Writes one event to the outbox; call it in the transaction of the state
-- change the event describes.
INSERT INTO outbox (id, subject, event_type, aggregate_id, envelope)
VALUES (@id::uuid, @subject::text, @event_type::text, @aggregate_id::uuid, @envelope::json);

-- name: OutboxClaimLock :exec
-- Serializes claims (a transaction-scoped advisory lock): a claim reads
-- its rows and records its lease before the next claim reads, so two
-- relays never lease the same row. A claim takes a few milliseconds.
SELECT pg_advisory_xact_lock(7237970079178127223);

-- name: OutboxLeaseFloor :one
-- The highest seq under a live lease: rows above it are claimable unless
-- waiting out a retry; the fast path of a claim starts there.
SELECT coalesce(max(last_seq), 0)::bigint AS floor FROM outbox_leases WHERE expires_at > now();

-- name: OutboxClaimRows :many
-- Up to max_rows unpublished rows with seq > after, oldest first, that no
-- live lease covers and that are not waiting out a retry backoff. Read
-- under OutboxClaimLock, in the transaction that writes the lease.
SELECT o.id, o.seq::bigint AS seq, o.subject, o.envelope
FROM outbox o
WHERE o.seq > @after::bigint
  AND (o.retry_at IS NULL OR o.retry_at <= now())
  AND NOT EXISTS (
      SELECT 1 FROM outbox_leases l
      WHERE l.expires_at > now() AND o.seq BETWEEN l.first_seq AND l.last_seq)
ORDER BY o.seq
LIMIT @max_rows::int;

-- name: OutboxLeaseInsert :exec
-- Leases the seq range [first_seq, last_seq] to relay_id until
-- now() + lease. A lease of this relay with the same first seq can only be
-- a stale one (its settle failed and it expired, or its rows would not
-- have been claimable): it is replaced.
INSERT INTO outbox_leases (relay_id, first_seq, last_seq, expires_at)
VALUES (@relay_id::text, @first_seq::bigint, @last_seq::bigint, now() + @lease::interval)
ON CONFLICT (relay_id, first_seq) DO UPDATE
SET last_seq = EXCLUDED.last_seq, expires_at = EXCLUDED.expires_at;

-- name: OutboxLeaseDelete :exec
-- Ends a lease once its batch settled (or the relay stops): rows it
-- covered that are still in the outbox become claimable again.
DELETE FROM outbox_leases WHERE relay_id = @relay_id::text AND first_seq = @first_seq::bigint;

-- name: OutboxLeaseDeleteExpired :exec
-- Forgets leases that expired (their relay died holding them): they hide
-- nothing any more, and would only pile up.
DELETE FROM outbox_leases WHERE expires_at <= now();

-- name: OutboxDeletePublished :many
-- Deletes rows JetStream has acknowledged. Whoever deletes an acknowledged
-- row, it is published. Returns, per row, the seconds from its commit to
-- now: the event-delivery latency.
DELETE FROM outbox
WHERE id = ANY(@ids::uuid[])
RETURNING extract(epoch FROM clock_timestamp() - created_at)::float8 AS latency_seconds;

-- name: OutboxRelease :execrows
-- Makes rows that were not acknowledged wait retry_after (zero: none)
-- before any relay claims them again.
UPDATE outbox
SET retry_at = now() + @retry_after::interval
WHERE id = ANY(@ids::uuid[]);

-- name: OutboxStats :one
-- Counts unpublished rows (every row in the outbox is unpublished; the
-- count stops at 100,000) and the age of the oldest one, by the database
-- clock. Both walk outbox_seq_idx from its head instead of scanning the
-- heap, which keeps deleted rows' pages until vacuum: the first walk over
-- entries of deleted rows marks them dead, so later walks cost about the
-- backlog.
SELECT (SELECT count(*) FROM (SELECT seq FROM outbox ORDER BY seq LIMIT 100000) AS head)::bigint AS backlog,
       coalesce(extract(epoch FROM now() - (SELECT created_at FROM outbox ORDER BY seq LIMIT 1)), 0)::float8 AS oldest_age_seconds;
