-- +goose Up
-- Regional failover as commands (docs/failover.md). What `boxoffice
-- failover` records in the database it acts on, so a second run of a step
-- changes nothing and the recovery point of each failover stays on file.

-- The onsales a failover paused: `failover stop` (on the old primary) and
-- `failover promote` (on the promoted standby) pause every open onsale of
-- the cell; `failover resume` reopens exactly these, never one its
-- organizer had paused.
CREATE TABLE failover_paused_events (
    -- The region epoch of the failover that paused it.
    epoch      bigint NOT NULL,
    event_id   uuid NOT NULL REFERENCES events (id),
    paused_at  timestamptz NOT NULL DEFAULT now(),
    resumed_at timestamptz,
    PRIMARY KEY (epoch, event_id)
);

-- The recovery point of each failover, measured by `failover promote` on
-- the standby just before it promoted it: what the standby had received of
-- the primary's database and streams, and what was still waiting in its
-- outbox. One row per epoch: the first measurement is kept.
CREATE TABLE failover_recovery_points (
    epoch                    bigint PRIMARY KEY,
    recorded_at              timestamptz NOT NULL DEFAULT now(),
    -- The standby's last replayed WAL position and the commit time of its
    -- last replayed transaction (NULL: none replayed since it started).
    replay_lsn               text,
    last_replayed_commit_at  timestamptz,
    -- WAL the primary had written that the standby had not replayed, in
    -- bytes; NULL when the primary did not answer.
    replay_lag_bytes         bigint,
    -- Messages of the cell's event stream the standby's copy lacked, as
    -- its mirror last reported (a lower bound when the link was down).
    stream_lag_messages      bigint NOT NULL,
    -- The copy's last sequence and the primary's (NULL: did not answer).
    stream_last_seq          bigint NOT NULL,
    primary_stream_last_seq  bigint,
    -- Outbox rows committed but not yet on the bus, as replicated.
    outbox_unpublished       bigint NOT NULL,
    outbox_oldest_at         timestamptz,
    -- The report as the operator saw it.
    report                   text NOT NULL
);

CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON failover_paused_events
    FOR EACH STATEMENT EXECUTE FUNCTION region_fence();
CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON failover_recovery_points
    FOR EACH STATEMENT EXECUTE FUNCTION region_fence();

-- +goose Down
DROP TABLE failover_recovery_points;
DROP TABLE failover_paused_events;
