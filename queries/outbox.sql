-- name: OutboxInsert :exec
-- Writes one event to the outbox, and its row of outbox_history (what the
-- order's timeline keeps of it once the relay has deleted the outbox row)
-- in the same statement; call it in the transaction of the state change
-- the event describes.
WITH history AS (
    INSERT INTO outbox_history (aggregate_id, event_id, event_type, occurred_at, causation_id, applied_by)
    VALUES (@aggregate_id::uuid, @id::uuid, @event_type::text, @occurred_at::timestamptz,
            sqlc.narg('causation_id')::text, sqlc.narg('applied_by')::text)
)
INSERT INTO outbox (id, subject, event_type, aggregate_id, envelope, trace_parent)
VALUES (@id::uuid, @subject::text, @event_type::text, @aggregate_id::uuid, @envelope::json, sqlc.narg(trace_parent)::text);

-- name: OutboxInsertMany :exec
-- OutboxInsert for several events in one statement: the rows keep the
-- order of the arrays (their seq too), and each array holds one element
-- per event. An empty string stands for no causation, no AppliedBy and no
-- traceparent. outbox.Insert queues the events of a transaction and sends
-- them with its COMMIT as this one statement (db.Rows).
WITH r AS (
    SELECT *
    FROM ROWS FROM (unnest(@ids::uuid[]), unnest(@subjects::text[]), unnest(@event_types::text[]),
                    unnest(@aggregate_ids::uuid[]), unnest(@envelopes::text[]),
                    unnest(@occurred_ats::timestamptz[]), unnest(@causation_ids::text[]),
                    unnest(@applied_bys::text[]), unnest(@trace_parents::text[]))
         WITH ORDINALITY AS r(id, subject, event_type, aggregate_id, envelope, occurred_at,
                              causation_id, applied_by, trace_parent, ord)
), history AS (
    INSERT INTO outbox_history (aggregate_id, event_id, event_type, occurred_at, causation_id, applied_by)
    SELECT r.aggregate_id, r.id, r.event_type, r.occurred_at, nullif(r.causation_id, ''), nullif(r.applied_by, '')
    FROM r
)
INSERT INTO outbox (id, subject, event_type, aggregate_id, envelope, trace_parent)
SELECT r.id, r.subject, r.event_type, r.aggregate_id, r.envelope::json, nullif(r.trace_parent, '')
FROM r
ORDER BY r.ord;

-- name: OutboxClaim :many
-- A relay's whole claim in one statement: up to max_rows unpublished rows,
-- oldest first, leased to relay_id for lease; see outbox_claim in
-- migrations/functions/outbox_claim.sql for what it guarantees. Run it on
-- the pool, outside a transaction: it is its own.
SELECT c.id::uuid AS id, c.seq::bigint AS seq, c.subject::text AS subject, c.envelope::json AS envelope,
       coalesce(c.trace_parent, '')::text AS trace_parent
FROM outbox_claim(@relay_id::text, @max_rows::int, @lease::interval, @head_scan::boolean, @floor::bigint) AS c;

-- name: OutboxSettle :many
-- A batch's whole settle in one statement: deletes the acknowledged rows,
-- makes failed and rejected rows wait, ends the lease; see outbox_settle
-- in migrations/functions/outbox_settle.sql. Run it on the pool, outside a
-- transaction: it is its own. Returns each deleted row's latency.
SELECT s.latency_seconds::float8 AS latency_seconds
FROM outbox_settle(@relay_id::text, @lease_first::bigint, @acked::bigint[], @failed::bigint[],
                   @retry_after::interval, @rejected::bigint[], @reject_after::interval) AS s;

-- name: OutboxStats :one
-- Counts unpublished rows (every row in the outbox is unpublished; the
-- count stops at 100,000) and the age of the oldest one, by the database
-- clock. Both walk outbox_pkey (seq) from its head instead of scanning the
-- heap, which keeps deleted rows' pages until vacuum: the first walk over
-- entries of deleted rows marks them dead, so later walks cost about the
-- backlog.
SELECT (SELECT count(*) FROM (SELECT seq FROM outbox ORDER BY seq LIMIT 100000) AS head)::bigint AS backlog,
       coalesce(extract(epoch FROM now() - (SELECT created_at FROM outbox ORDER BY seq LIMIT 1)), 0)::float8 AS oldest_age_seconds;
