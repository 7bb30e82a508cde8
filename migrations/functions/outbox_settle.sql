-- outbox_settle: the settle of a relay's batch as one server-side
-- function, so it costs the relay a single round trip. Call it as a
-- statement of its own, outside any explicit transaction: the statement is
-- then its own transaction, so either all of it takes effect or none does.
-- On failure nothing changes: the lease expires and a relay publishes its
-- rows again (JetStream drops the copies by their message id).
-- relay.(*Relay).markPublished is its caller; relay.(*Relay).endLease
-- calls it with no rows to end a lease whose batch was never published.
--
-- It commits without waiting for its WAL to reach disk
-- (synchronous_commit off, for this transaction only): losing it in a
-- database crash brings rows back that are published once more, and
-- JetStream drops the copies.
--
-- Every statement is fenced (00010_region_fence.sql); the lease delete
-- always runs, so a relay of a failed-over region cannot settle.
--
-- Its statements run generic plans from the first call
-- (plan_cache_mode = force_generic_plan, which the function's SET clause
-- restores on return; the synchronous_commit set above still holds for
-- the transaction): each reads rows by key, and with the ids as an array
-- PostgreSQL's plan cache otherwise planned the delete anew on every
-- settle of a small batch, the relay's state below saturation (see
-- hold_reserve.sql and docs/performance.md, "Planned once per session").
--
-- This file is the function's only definition; migrations.Up applies it on
-- every run (see hold_reserve.sql for what a change of signature needs).
CREATE OR REPLACE FUNCTION outbox_settle(
    p_relay_id     text,
    p_lease_first  bigint,    -- the first seq of the batch's lease: its key with p_relay_id
    p_acked        bigint[],  -- the seqs of the rows JetStream acknowledged
    p_failed       bigint[],  -- the seqs of rows not acknowledged, for a reason that may pass
    p_retry_after  interval,  -- how long the failed rows wait before a relay claims them again
    p_rejected     bigint[],  -- the seqs of rows JetStream refused
    p_reject_after interval   -- how long the rejected rows wait
) RETURNS TABLE (latency_seconds double precision)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
-- Deletes the acknowledged rows (whoever deletes an acknowledged row, it
-- is published: a row another relay already deleted is skipped), makes the
-- failed and rejected rows wait before they are claimed again, and ends
-- the lease, so its rows still in the outbox become claimable. Returns,
-- per deleted row, the seconds from its commit to now: the
-- event-delivery latency.
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);

    IF cardinality(p_acked) > 0 THEN
        RETURN QUERY
        DELETE FROM outbox o WHERE o.seq = ANY (p_acked)
        RETURNING extract(epoch FROM clock_timestamp() - o.created_at)::float8;
    END IF;
    IF cardinality(p_failed) > 0 THEN
        UPDATE outbox o SET retry_at = now() + p_retry_after WHERE o.seq = ANY (p_failed);
    END IF;
    IF cardinality(p_rejected) > 0 THEN
        UPDATE outbox o SET retry_at = now() + p_reject_after WHERE o.seq = ANY (p_rejected);
    END IF;

    DELETE FROM outbox_leases l WHERE l.relay_id = p_relay_id AND l.first_seq = p_lease_first;
END
$$;
