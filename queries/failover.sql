-- name: FailoverPauseOnsales :many
-- Pauses every onsale of the cell that is not paused already and records
-- each one it paused under @epoch; returns the events it paused now (none
-- on a second run).
WITH open AS (
    SELECT e.id FROM events e LEFT JOIN onsales o ON o.event_id = e.id
    WHERE o.event_id IS NULL OR NOT o.paused
), paused AS (
    INSERT INTO onsales (event_id, paused)
    SELECT id, true FROM open
    ON CONFLICT (event_id) DO UPDATE SET paused = true, updated_at = now()
    RETURNING event_id
)
INSERT INTO failover_paused_events (epoch, event_id)
SELECT @epoch::bigint, event_id FROM paused
ON CONFLICT (epoch, event_id) DO UPDATE SET resumed_at = NULL
RETURNING event_id;

-- name: FailoverResumeOnsales :many
-- Reopens the onsales the failover of @epoch paused and that nobody has
-- reopened since; returns the events reopened now (none on a second run).
WITH todo AS (
    UPDATE failover_paused_events SET resumed_at = now()
    WHERE epoch = @epoch::bigint AND resumed_at IS NULL
    RETURNING event_id
)
UPDATE onsales o SET paused = false, updated_at = now()
FROM todo WHERE o.event_id = todo.event_id
RETURNING o.event_id;

-- name: FailoverReplicaState :one
-- The standby's side of the replication: whether it is still a standby,
-- what it has received and replayed, and when the last replayed
-- transaction committed on the primary, in Unix seconds (0: none replayed
-- since the standby started). (The WAL receiver's status is in
-- pg_stat_wal_receiver, which sqlc's catalog lacks; received and replayed
-- positions tell the same story.)
SELECT pg_is_in_recovery() AS in_recovery,
       coalesce(pg_last_wal_receive_lsn()::text, '')::text AS receive_lsn,
       coalesce(pg_last_wal_replay_lsn()::text, '')::text AS replay_lsn,
       coalesce(extract(epoch FROM pg_last_xact_replay_timestamp()), 0)::float8 AS last_replayed_commit_unix;

-- name: FailoverPrimaryLag :one
-- On the primary: its current WAL position and how many bytes of it
-- @replay_lsn (the standby's) is behind.
SELECT pg_current_wal_lsn()::text AS current_lsn,
       pg_wal_lsn_diff(pg_current_wal_lsn(), @replay_lsn::pg_lsn)::bigint AS lag_bytes;

-- name: FailoverOutboxBacklog :one
-- Outbox rows committed but not yet on the bus, and the oldest one's
-- time in Unix seconds (0: the outbox is empty).
SELECT (SELECT count(*) FROM outbox)::bigint AS unpublished,
       coalesce(extract(epoch FROM (SELECT created_at FROM outbox ORDER BY seq LIMIT 1)), 0)::float8 AS oldest_unix;

-- name: FailoverPromote :one
-- Promotes the standby this session is connected to, waiting up to
-- @wait_seconds for the promotion to complete; false if it did not.
SELECT pg_promote(true, @wait_seconds::int) AS promoted;

-- name: FailoverRecoveryPointInsert :one
-- Stores the recovery point of the failover to @epoch unless one is stored
-- already; returns the stored one either way.
WITH ins AS (
    INSERT INTO failover_recovery_points (
        epoch, replay_lsn, last_replayed_commit_at, replay_lag_bytes, stream_lag_messages,
        stream_last_seq, primary_stream_last_seq, outbox_unpublished, outbox_oldest_at, report)
    VALUES (@epoch::bigint, sqlc.narg('replay_lsn')::text, sqlc.narg('last_replayed_commit_at')::timestamptz,
            sqlc.narg('replay_lag_bytes')::bigint, @stream_lag_messages::bigint, @stream_last_seq::bigint,
            sqlc.narg('primary_stream_last_seq')::bigint, @outbox_unpublished::bigint,
            sqlc.narg('outbox_oldest_at')::timestamptz, @report::text)
    ON CONFLICT (epoch) DO NOTHING
    RETURNING epoch, recorded_at, report
)
SELECT epoch, recorded_at, report FROM ins
UNION ALL
SELECT epoch, recorded_at, report FROM failover_recovery_points WHERE epoch = @epoch::bigint
LIMIT 1;
