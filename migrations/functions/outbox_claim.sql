-- outbox_claim: a relay's whole claim as one server-side function, so a
-- claim costs the relay a single round trip. Call it as a statement of its
-- own, outside any explicit transaction: the statement is then its own
-- transaction, and everything below commits, or nothing does, when it
-- ends. relay.(*Relay).claim is its caller and says when to pass
-- p_head_scan.
--
-- Two relays never lease the same row: claims take turns on a
-- transaction-scoped advisory lock, held until the claim's transaction
-- commits (after the lease is written), and each statement below runs with
-- a fresh snapshot, so it sees every lease committed by the claims that
-- held the lock before. No outbox row is updated: the claim reads its rows
-- and writes one lease (outbox_leases) over their seq range.
--
-- The claim commits without waiting for its WAL to reach disk
-- (synchronous_commit off, for this transaction only): losing it in a
-- database crash leaves its rows claimable, and JetStream drops the copies
-- a relay then publishes again by their message id.
--
-- Like every write, the lease's is fenced (00010_region_fence.sql): a
-- relay of a failed-over region cannot claim. A claim that finds nothing
-- still deletes expired leases, so it is refused too.
--
-- This file is the function's only definition; migrations.Up applies it on
-- every run (see hold_reserve.sql for what a change of signature needs).
--
-- History: a claim was a transaction of up to six statements from the
-- relay (lock, lease floor, rows, expired-lease delete, rows again, lease
-- insert) before it became this function; until issue 25's third round
-- it probed outbox_leases once per candidate row (NOT EXISTS), which read
-- the lease table's dead tuples again for every row.
CREATE OR REPLACE FUNCTION outbox_claim(
    p_relay_id  text,
    p_max_rows  integer,
    p_lease     interval,  -- how long the lease holds the rows
    p_head_scan boolean,   -- start from the head of the outbox, not above the highest live lease
    p_floor     bigint     -- the head: a scan from the head reads rows with seq >= p_floor (0: the true head)
) RETURNS TABLE (id uuid, seq bigint, subject text, envelope json, trace_parent text)
LANGUAGE plpgsql AS $$
-- Returns up to p_max_rows unpublished rows, oldest first, that no live
-- lease covers and that are not waiting out a retry backoff, leased to
-- p_relay_id until now() + p_lease; nothing (and no lease) when there are
-- none. The lease starts at the first row's seq; one of this relay's
-- leases with the same first seq can only be stale (its settle failed and
-- it expired, or its rows would not have been claimable) and is replaced.
DECLARE
    -- v_after is the seq the rows are read above: the highest seq under a
    -- live lease (the fast path, which skips the rows in flight), or NULL
    -- for a scan from the head (from p_floor). The caller keeps the floor
    -- (the first seq its last scan from the head found: nothing below it
    -- was claimable then) and passes 0 now and then, to find rows a floor
    -- hides: committed late with a lower seq, back from a retry backoff,
    -- of an expired lease.
    v_after     bigint;
    -- v_leased is the seq ranges under live leases, v_expired whether any
    -- lease has expired: the lease table is read once per claim, not once
    -- per outbox row the scan considers (it churns, a row inserted and
    -- deleted per batch, so its heap is mostly dead tuples between
    -- vacuums: probing it per candidate row was most of a claim's cost).
    v_leased    int8multirange;
    v_max_lease bigint;
    v_expired   boolean;
    v_ids       uuid[];
    v_seqs      bigint[];
    v_subjects  text[];
    v_envelopes json[];
    v_traces    text[];
    v_first     bigint;
    v_last      bigint;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock(7237970079178127223);

    SELECT coalesce(range_agg(int8range(l.first_seq, l.last_seq, '[]')) FILTER (WHERE l.expires_at > now()),
                    '{}'::int8multirange),
           max(l.last_seq) FILTER (WHERE l.expires_at > now()),
           coalesce(bool_or(l.expires_at <= now()), false)
    INTO v_leased, v_max_lease, v_expired
    FROM outbox_leases l;
    -- The fast path starts above the highest live lease; with none above
    -- the floor it would read exactly what the scan from the head reads,
    -- so it is skipped rather than run twice.
    IF NOT p_head_scan AND v_max_lease >= p_floor THEN
        v_after := v_max_lease;
    END IF;
    LOOP
        IF v_after IS NULL AND v_expired THEN
            -- Leases that expired (their relay died holding them) hide
            -- nothing any more, and would only pile up.
            DELETE FROM outbox_leases l WHERE l.expires_at <= now();
            v_expired := false;
        END IF;
        -- The arrays are filled in one pass over the same rows, so their
        -- elements line up.
        SELECT array_agg(c.id), array_agg(c.seq), array_agg(c.subject), array_agg(c.envelope), array_agg(c.trace_parent),
               min(c.seq), max(c.seq)
        INTO v_ids, v_seqs, v_subjects, v_envelopes, v_traces, v_first, v_last
        FROM (
            SELECT o.id, o.seq, o.subject, o.envelope, o.trace_parent
            FROM outbox o
            WHERE o.seq > coalesce(v_after, p_floor - 1)
              AND (o.retry_at IS NULL OR o.retry_at <= now())
              AND NOT v_leased @> o.seq
            ORDER BY o.seq
            LIMIT p_max_rows
        ) AS c;
        -- A fast path that comes back short misses rows it cannot see
        -- (committed late with a lower seq, back from a retry backoff, of
        -- an expired lease): scan again from the head.
        EXIT WHEN v_after IS NULL OR cardinality(v_ids) = p_max_rows;
        v_after := NULL;
    END LOOP;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;

    INSERT INTO outbox_leases (relay_id, first_seq, last_seq, expires_at)
    VALUES (p_relay_id, v_first, v_last, now() + p_lease)
    ON CONFLICT (relay_id, first_seq) DO UPDATE
    SET last_seq = EXCLUDED.last_seq, expires_at = EXCLUDED.expires_at;

    RETURN QUERY
    SELECT c.id, c.seq, c.subject, c.envelope, c.trace_parent
    FROM unnest(v_ids, v_seqs, v_subjects, v_envelopes, v_traces) AS c(id, seq, subject, envelope, trace_parent)
    ORDER BY c.seq;
END
$$;
