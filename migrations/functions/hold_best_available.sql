-- hold_best_available: a hold of p_quantity seats of one price category
-- that the database picks (issue 30 item 4), in one statement and one
-- transaction like hold_reserve, which it calls with the seats it picked:
-- every rule of a hold (the per-buyer and per-category limits, blocked
-- seats, the onsale phase and its presale code, the outbox rows, the
-- idempotency key) is applied there, once, for both kinds of hold.
--
-- What it picks: the best free run of p_quantity adjacent seats (same
-- section and row, consecutive numbers: seats.seat_row and seat_number,
-- 00040), best by the sum of the seats' scores, then by seat map order,
-- among the 256 best free seats (a bound on the work of one pick: a run
-- elsewhere is made only of seats ranked below those; with scores by row,
-- as organizers set them, the front rows' seats);
-- when no such run is free, and p_adjacent_only is false, the
-- p_quantity best free seats wherever they are. A single seat is always
-- "adjacent". Free seats are read from free_seats (00042), kept by the
-- owners' triggers: a pick reads free seats only, however much of the
-- category is sold. A seat whose hold lapsed is picked once the expiry
-- worker has released it (a named-seat hold reclaims it at once).
--
-- How it stays correct and fast under a crowd of buyers asking at once:
--   * Locks are taken in hold_reserve's order (the presale code's, the
--     (event, buyer) pair's, then seats), the first two before any seat.
--   * Seats are locked FOR UPDATE SKIP LOCKED: a buyer never queues behind
--     another for the front rows, it takes the next best run instead.
--     Each try runs in its own subtransaction, so a run it could lock only
--     in part leaves no lock behind (the seats it got stay free for
--     others) and a run hold_reserve finds taken (held by a hold committed
--     since the pick read) is let go the same way.
--   * hold_reserve, under those locks, checks every seat again: the pick
--     is a proposal, never trusted. So at most one active hold owns a seat
--     and a hold gets all its seats or none, as for a named-seat hold.
--   * Bounded work: at most 3 rounds of at most 32 runs each; seats found
--     taken are never proposed again, seats locked by others only for the
--     rest of the round. A buyer that found only locked runs in the last
--     round falls back to scattered seats (or, adjacent only, gets
--     'not_enough_seats'). A walk of scattered seats that comes up short
--     while other transactions have free seats locked waits for them
--     (holding no seat) and walks again, up to the last round.
--
-- Outcomes: hold_reserve's (seats_taken excepted: it is retried), with the
-- seats of the hold ('held', or 'replay' of the key's stored hold) as JSON
-- [{"id","section","label"}] in seat map order; 'category_not_in_event';
-- 'not_enough_seats' when fewer than p_quantity free seats (or, adjacent
-- only, no free run of them) are left to pick. Nothing is written unless
-- the outcome is 'held'.
--
-- This file is the function's only definition; a change of its arguments
-- or columns needs a versioned migration dropping the old signature.
CREATE OR REPLACE FUNCTION hold_best_available(
    p_event_id       uuid,
    p_category_id    uuid,
    p_quantity       integer,  -- 1 to 8, checked at the HTTP edge
    p_adjacent_only  boolean,
    p_user_id        uuid,
    p_order_id       uuid,
    p_hold_id        uuid,
    p_hold_ttl       interval,
    p_key            text,
    p_request_hash   bytea,
    p_key_ttl        interval,
    p_correlation_id text,
    p_outbox_id      uuid,
    p_seat_limit     integer,
    p_authorization_id uuid,
    p_trace_parent   text
) RETURNS TABLE (outcome text, taken uuid[], expires_at timestamptz, amount_minor bigint, currency text,
                key_request_hash bytea, key_response jsonb, seats jsonb)
-- JIT compiling the pick's queries (whose estimates over a large category
-- are high) costs far more than running them. Without bitmap scans, a
-- range of free_seat_pick_idx read in its order is the only cheap plan for
-- the pick's reads, whatever the statistics say: on a new event not yet
-- analyzed the planner took the category for two rows and read all of it
-- through a bitmap to sort it (59 ms a pick on 99,500 seats). These
-- settings hold for the hold_reserve call too, whose reads are by key.
-- The plans are cached as hold_reserve's are: planning the pick and
-- hold_reserve's statements on every call cost more than the rest of
-- the hold together.
LANGUAGE plpgsql SET jit = off SET enable_bitmapscan = off AS $$
DECLARE
    c_rounds  constant integer := 3;
    c_runs    constant integer := 32;
    c_candidates constant integer := 256;
    v_res     record;
    v_done    boolean := false;
    v_short   boolean := false;
    v_skip    uuid[] := '{}';  -- seats hold_reserve found taken: never proposed again
    v_busy    uuid[];          -- seats another transaction has locked: skipped this round
    v_runs    integer;
    v_run     uuid[];
    v_got     uuid[];
    v_gone    uuid[];          -- seats of a locked run no longer free: taken since the runs were read
    v_pick    uuid[];
    v_limit   integer;
    v_phase   onsale_phases%ROWTYPE;
    v_code_id uuid;
    v_cand    record;
    v_locked  uuid[];          -- free seats the walk found locked by another transaction
BEGIN
    IF p_quantity NOT BETWEEN 1 AND 8 THEN
        RAISE EXCEPTION 'hold_best_available: quantity % out of range', p_quantity;
    END IF;

    -- A retry of a request that succeeded is hold_reserve's to answer, from
    -- its key, before anything is picked: given a seat no event has (the
    -- nil uuid) it answers 'replay' from the key, or, should the key have
    -- vanished since this read, refuses the seat having written nothing.
    IF EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.user_id = p_user_id AND k.key = p_key) THEN
        SELECT * INTO v_res FROM hold_reserve(p_event_id, ARRAY['00000000-0000-0000-0000-000000000000'::uuid],
            p_user_id, p_order_id, p_hold_id, p_hold_ttl, p_key, p_request_hash, p_key_ttl, p_correlation_id,
            p_outbox_id, p_seat_limit, p_authorization_id, p_trace_parent);
        v_pick := ARRAY(SELECT hs.seat_id FROM hold_seats hs WHERE hs.hold_id = (v_res.key_response->>'hold_id')::uuid);
        RETURN QUERY SELECT v_res.outcome, v_res.taken, v_res.expires_at, v_res.amount_minor, v_res.currency,
            v_res.key_request_hash, v_res.key_response,
            (SELECT jsonb_agg(jsonb_build_object('id', s.id, 'section', s.section, 'label', s.label) ORDER BY s.position)
             FROM seats s WHERE s.id = ANY (v_pick));
        RETURN;
    END IF;

    SELECT c.seat_limit INTO v_limit FROM price_categories c WHERE c.id = p_category_id AND c.event_id = p_event_id;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'category_not_in_event', NULL::uuid[], NULL::timestamptz, NULL::bigint, NULL::text,
            NULL::bytea, NULL::jsonb, NULL::jsonb;
        RETURN;
    END IF;

    -- hold_reserve's locks that come before the seats, taken here before
    -- any seat is locked (the same keys; advisory locks are re-entrant, so
    -- hold_reserve taking them again costs nothing). Should the phase
    -- change in between (its opening instant passing), a deadlock is
    -- possible and the caller's retry of lock races answers it.
    SELECT * INTO v_phase FROM onsale_phase_in_force(p_event_id);
    IF FOUND AND v_phase.presale THEN
        SELECT r.code_id INTO v_code_id FROM presale_redemptions r WHERE r.phase_id = v_phase.id AND r.user_id = p_user_id;
        IF FOUND THEN
            PERFORM pg_advisory_xact_lock(hashtextextended('presale_code:' || v_code_id::text, 0));
        END IF;
    END IF;
    IF p_seat_limit > 0 OR v_limit > 0 THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('seat_limit:' || p_event_id::text || ':' || p_user_id::text, 0));
    END IF;

    <<rounds>>
    FOR v_round IN 1..c_rounds LOOP
        v_busy := '{}';
        v_runs := 0;
        IF p_quantity > 1 THEN
            -- The free runs of p_quantity adjacent seats, best first, among
            -- the c_candidates best free seats: one range of
            -- free_seat_pick_idx (00042: free seats only, however much of
            -- the category is sold), split by row into islands of
            -- consecutive numbers (number minus rank), each window of
            -- p_quantity seats within an island a run.
            FOR v_run IN
                SELECT win.ids FROM (
                    SELECT array_agg(a.seat_id) OVER w AS ids, count(*) OVER w AS n, sum(a.score) OVER w AS total, a.position
                    FROM (
                        SELECT c.seat_id, c.section, c.seat_row, c.seat_number, c.score, c.position,
                               c.seat_number - row_number() OVER (PARTITION BY c.section, c.seat_row ORDER BY c.seat_number) AS island
                        FROM (SELECT f.seat_id, f.section, f.seat_row, f.seat_number, f.score, f.position
                              FROM free_seats f
                              WHERE f.event_id = p_event_id AND f.category_id = p_category_id
                                AND NOT (f.seat_id = ANY (v_skip))
                              ORDER BY f.score DESC, f.position
                              LIMIT c_candidates) c
                        WHERE c.seat_row IS NOT NULL
                    ) a
                    WINDOW w AS (PARTITION BY a.section, a.seat_row, a.island ORDER BY a.seat_number
                                 ROWS BETWEEN CURRENT ROW AND p_quantity - 1 FOLLOWING)
                ) win
                WHERE win.n = p_quantity
                ORDER BY win.total DESC, win.position
                LIMIT c_runs
            LOOP
                v_runs := v_runs + 1;
                CONTINUE WHEN v_run && v_busy OR v_run && v_skip;
                BEGIN
                    SELECT array_agg(l.id) INTO v_got
                    FROM (SELECT s.id FROM seats s WHERE s.id = ANY (v_run) ORDER BY s.id FOR UPDATE SKIP LOCKED) l;
                    IF coalesce(cardinality(v_got), 0) < p_quantity THEN
                        v_busy := v_busy || ARRAY(SELECT unnest(v_run) EXCEPT SELECT unnest(coalesce(v_got, '{}')));
                        RAISE EXCEPTION USING ERRCODE = 'BX002';
                    END IF;
                    -- Under the locks, a hold that committed since the runs
                    -- were read shows: its seats have left free_seats. Let
                    -- them go before hold_reserve does its work for nothing.
                    v_gone := ARRAY(SELECT unnest(v_run) EXCEPT SELECT f.seat_id FROM free_seats f WHERE f.seat_id = ANY (v_run));
                    IF cardinality(v_gone) > 0 THEN
                        v_skip := v_skip || v_gone;
                        RAISE EXCEPTION USING ERRCODE = 'BX002';
                    END IF;
                    SELECT * INTO v_res FROM hold_reserve(p_event_id, v_run, p_user_id, p_order_id, p_hold_id,
                        p_hold_ttl, p_key, p_request_hash, p_key_ttl, p_correlation_id, p_outbox_id, p_seat_limit,
                        p_authorization_id, p_trace_parent);
                    IF v_res.outcome = 'seats_taken' THEN
                        v_skip := v_skip || v_res.taken;
                        RAISE EXCEPTION USING ERRCODE = 'BX002';
                    END IF;
                    v_done := true;
                    v_pick := v_run;
                EXCEPTION WHEN SQLSTATE 'BX002' THEN
                    NULL; -- the try's locks are let go with its subtransaction
                END;
                EXIT rounds WHEN v_done;
            END LOOP;
        END IF;

        IF p_quantity > 1 AND (p_adjacent_only OR (v_runs > 0 AND v_round < c_rounds)) THEN
            -- Adjacent runs exist but were all locked or taken: look again.
            -- No run at all, adjacent only: there is nothing to pick.
            EXIT rounds WHEN v_runs = 0;
            CONTINUE rounds;
        END IF;

        -- The best free seats wherever they are (one seat, or no free run
        -- of them), walked in pick order (free_seat_pick_idx), each locked
        -- as it is found.
        v_locked := '{}';
        BEGIN
            v_got := '{}';
            FOR v_cand IN
                SELECT f.seat_id AS id FROM free_seats f
                WHERE f.event_id = p_event_id AND f.category_id = p_category_id
                ORDER BY f.score DESC, f.position
                -- More than a crowd of buyers can have locked at once
                -- (64 × 8): a bound, so a generic plan reads the index in
                -- order rather than sort the category.
                LIMIT 1024
            LOOP
                CONTINUE WHEN v_cand.id = ANY (v_skip);
                PERFORM 1 FROM seats l WHERE l.id = v_cand.id FOR UPDATE SKIP LOCKED;
                IF NOT FOUND THEN
                    v_locked := v_locked || v_cand.id;
                    CONTINUE;
                END IF;
                -- Under the lock, as for a run: still free, or taken by a
                -- hold committed since this walk began.
                PERFORM 1 FROM free_seats f WHERE f.seat_id = v_cand.id;
                IF FOUND THEN
                    v_got := v_got || v_cand.id;
                    EXIT WHEN cardinality(v_got) >= p_quantity;
                ELSE
                    v_skip := v_skip || v_cand.id;
                END IF;
            END LOOP;
            IF coalesce(cardinality(v_got), 0) < p_quantity THEN
                v_short := true;
                RAISE EXCEPTION USING ERRCODE = 'BX002';
            END IF;
            SELECT * INTO v_res FROM hold_reserve(p_event_id, v_got, p_user_id, p_order_id, p_hold_id,
                p_hold_ttl, p_key, p_request_hash, p_key_ttl, p_correlation_id, p_outbox_id, p_seat_limit,
                p_authorization_id, p_trace_parent);
            IF v_res.outcome = 'seats_taken' THEN
                v_skip := v_skip || v_res.taken;
                RAISE EXCEPTION USING ERRCODE = 'BX002';
            END IF;
            v_done := true;
            v_pick := v_got;
        EXCEPTION WHEN SQLSTATE 'BX002' THEN
            NULL;
        END;
        -- Short only because other transactions have free seats locked (a
        -- buyer's try that may yet let them go): wait for them, holding no
        -- seat of this hold's (the try above let its locks go), then look
        -- again. So 'not_enough_seats' means fewer free seats than asked,
        -- not seats busy for a moment. The wait takes the seats in id order,
        -- as every blocking seat lock does, and lets them go at once.
        IF v_short AND cardinality(v_locked) > 0 AND v_round < c_rounds THEN
            BEGIN
                PERFORM 1 FROM (SELECT l.id FROM seats l WHERE l.id = ANY (v_locked) ORDER BY l.id FOR UPDATE) w;
                RAISE EXCEPTION USING ERRCODE = 'BX002';
            EXCEPTION WHEN SQLSTATE 'BX002' THEN
                NULL;
            END;
            v_short := false;
            CONTINUE rounds;
        END IF;
        EXIT rounds WHEN v_done OR v_short;
    END LOOP;

    IF NOT v_done THEN
        RETURN QUERY SELECT 'not_enough_seats', NULL::uuid[], NULL::timestamptz, NULL::bigint, NULL::text,
            NULL::bytea, NULL::jsonb, NULL::jsonb;
        RETURN;
    END IF;
    IF v_res.outcome = 'replay' THEN
        -- A concurrent twin of this request committed first (hold_reserve
        -- saw its key): its seats.
        v_pick := ARRAY(SELECT hs.seat_id FROM hold_seats hs WHERE hs.hold_id = (v_res.key_response->>'hold_id')::uuid);
    ELSIF v_res.outcome <> 'held' THEN
        v_pick := '{}';
    END IF;
    RETURN QUERY SELECT v_res.outcome, v_res.taken, v_res.expires_at, v_res.amount_minor, v_res.currency,
        v_res.key_request_hash, v_res.key_response,
        (SELECT jsonb_agg(jsonb_build_object('id', s.id, 'section', s.section, 'label', s.label) ORDER BY s.position)
         FROM seats s WHERE s.id = ANY (v_pick));
END
$$;
