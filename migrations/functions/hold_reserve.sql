-- hold_reserve: the whole hold transaction as one server-side function, so
-- a hold costs the API a single round trip and a single statement. Each
-- statement inside runs with a fresh snapshot, in order: the seat locks are
-- taken before the availability check reads, so the check sees every hold
-- committed by whoever held the locks before us.
--
-- This file is the function's only definition. migrations.Up applies it
-- after the versioned migrations on every run (see migrations.go), so an
-- edit here reaches every database at its next migrate. CREATE OR REPLACE
-- keeps it idempotent; a change of the argument list or of the returned
-- columns also needs a versioned migration that drops the old signature
-- (as 00014 and 00016 do), since CREATE OR REPLACE cannot change either.
--
-- History: 00002 introduced it; 00014 added p_seat_limit (the organizer's
-- per-buyer limit, checked under a lock of the (event, buyer) pair, so two
-- holds of one buyer racing each other cannot together exceed it); 00016
-- added p_authorization_id and the PaymentAuthorizationRequested row;
-- 00038 added p_trace_parent, stored with the order and both outbox rows.
-- 00035 priced seats from their price category and added the categories'
-- own per-buyer limits (checked under the same (event, buyer) lock); 00036
-- counted a seat the organizer blocked as taken; 00039 applied the onsale
-- phase in force (its categories, and for a presale the buyer's code and
-- the code's seat limit); 00040 read that phase from onsale_phase_in_force.
-- 00042: the requested seats are read by their keys only ("s.event_id IS
-- NOT DISTINCT FROM p_event_id" is the same test as "=" for a seat, but
-- no index condition): with "=", once the statistics of seats know only
-- older events, the planner takes a new event for a handful of seats and
-- reads its seats whole through an index on event_id, every hold, until
-- seats was analyzed again.
--
-- Its statements run generic plans from the first call
-- (plan_cache_mode = force_generic_plan): planned once per session, not
-- once per hold. PL/pgSQL caches each statement's plan, but PostgreSQL's
-- plan cache costs a generic plan for an array parameter of ten elements
-- and a custom one for the two seats it was given, so the seat reads and
-- the seat lock were planned anew on every call (about 0.45 ms of a
-- hold's server CPU on a quiet machine; docs/performance.md, "Planned
-- once per session"). Every statement here reads rows by their keys, and
-- its generic plan probes the indexes a custom plan would (checked on an
-- event of 100,000 seats); the taken check already ran its generic plan
-- from a session's sixth call.
CREATE OR REPLACE FUNCTION hold_reserve(
    p_event_id       uuid,
    p_seat_ids       uuid[],   -- distinct
    p_user_id        uuid,
    p_order_id       uuid,
    p_hold_id        uuid,
    p_hold_ttl       interval,
    p_key            text,
    p_request_hash   bytea,
    p_key_ttl        interval,
    p_correlation_id text,
    p_outbox_id      uuid,
    p_seat_limit     integer,  -- seats one buyer may hold or own in the event; 0: no limit
    p_authorization_id uuid,   -- event id of the PaymentAuthorizationRequested row
    p_trace_parent   text      -- W3C traceparent of the request's span; NULL when tracing is off
) RETURNS TABLE (outcome text, taken uuid[], expires_at timestamptz, amount_minor bigint, currency text,
                key_request_hash bytea, key_response jsonb)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
-- Outcomes: 'held' (everything written, HoldCreated and
-- PaymentAuthorizationRequested included); 'replay' with the request hash and
-- response stored under the user's key by an earlier request (nothing
-- written; the caller compares the hashes); 'seats_not_in_event' or
-- 'seats_taken' with the taken seats (nothing written); 'seat_limit' when
-- the buyer would hold or own more than p_seat_limit seats of the event
-- (nothing written). When a concurrent
-- request with the same user and key commits between our check and our
-- insert, it raises SQLSTATE BX001 so that nothing this call wrote survives.
DECLARE
    v_count    integer;
    v_amount   bigint;
    v_currency text;
    v_taken    uuid[];
    v_expires  timestamptz := now() + p_hold_ttl;
    v_hash     bytea;
    v_response jsonb;
    v_mine     bigint;
    v_limited  uuid[];    -- the category of each requested seat whose category has a limit
    v_mine_seats uuid[];  -- the buyer's seats held or owned, this request's excepted
    v_phase    onsale_phases%ROWTYPE;
    v_code     presale_codes%ROWTYPE;
BEGIN
    -- A retry of a request that already succeeded is answered from its key
    -- without touching the seats.
    SELECT k.request_hash, jsonb_set(k.response, '{status}', to_jsonb(o.status)) INTO v_hash, v_response
    FROM idempotency_keys k JOIN orders o ON o.id = k.order_id
    WHERE k.user_id = p_user_id AND k.key = p_key;
    IF FOUND THEN
        RETURN QUERY SELECT 'replay', NULL::uuid[], NULL::timestamptz, NULL::bigint, NULL::text, v_hash, v_response;
        RETURN;
    END IF;

    -- The onsale phase in force (00039): the latest opened, or before any
    -- has opened the first (waitingroom.InForce decides the same way).
    -- It may sell only some categories; a presale admits only a buyer who
    -- redeemed one of its codes, and the seats all of a code's buyers hold
    -- or own (as for the per-buyer limit below) may not exceed its
    -- max_seats, counted under a lock of the code so that its buyers'
    -- holds take turns. Locks are taken in one order on every path:
    -- this code lock, then the (event, buyer) lock, then the seats.
    SELECT * INTO v_phase FROM onsale_phase_in_force(p_event_id);
    IF FOUND THEN
        IF v_phase.presale THEN
            SELECT c.* INTO v_code FROM presale_redemptions r JOIN presale_codes c ON c.id = r.code_id
            WHERE r.phase_id = v_phase.id AND r.user_id = p_user_id;
            IF NOT FOUND THEN
                RETURN QUERY SELECT 'presale_code_required', NULL::uuid[], NULL::timestamptz, NULL::bigint, NULL::text, NULL::bytea, NULL::jsonb;
                RETURN;
            END IF;
        END IF;
        IF cardinality(v_phase.category_ids) > 0 AND EXISTS (
            SELECT 1 FROM seats s WHERE s.id = ANY (p_seat_ids) AND s.event_id IS NOT DISTINCT FROM p_event_id
              AND NOT (s.category_id = ANY (v_phase.category_ids))) THEN
            RETURN QUERY SELECT 'phase_category', NULL::uuid[], NULL::timestamptz, NULL::bigint, NULL::text, NULL::bytea, NULL::jsonb;
            RETURN;
        END IF;
        IF v_phase.presale THEN
            PERFORM pg_advisory_xact_lock(hashtextextended('presale_code:' || v_code.id::text, 0));
            SELECT count(DISTINCT theirs) INTO v_mine
            FROM presale_redemptions r, buyer_seats(p_event_id, r.user_id) AS theirs
            WHERE r.code_id = v_code.id AND NOT (theirs = ANY (p_seat_ids));
            IF v_mine + cardinality(p_seat_ids) > v_code.max_seats THEN
                RETURN QUERY SELECT 'presale_seat_limit', NULL::uuid[], NULL::timestamptz, NULL::bigint, NULL::text, NULL::bytea, NULL::jsonb;
                RETURN;
            END IF;
        END IF;
    END IF;

    -- The per-buyer limits, the organizer's for the event and each price
    -- category's own (00035), checked under a lock of the (event, buyer)
    -- pair: one buyer's holds for one event take turns here, so two at
    -- once cannot both fit under a limit. The buyer's seats (buyer_seats:
    -- held or owned; seats of this very request do not count) are read
    -- once, after the lock, with a fresh snapshot, so they include the
    -- holds committed by whoever held the lock before. Only a request
    -- that some limit applies to takes the lock and reads them.
    SELECT coalesce(array_agg(s.category_id) FILTER (WHERE c.seat_limit > 0), '{}') INTO v_limited
    FROM seats s JOIN price_categories c ON c.id = s.category_id
    WHERE s.id = ANY (p_seat_ids) AND s.event_id IS NOT DISTINCT FROM p_event_id;
    IF p_seat_limit > 0 OR cardinality(v_limited) > 0 THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('seat_limit:' || p_event_id::text || ':' || p_user_id::text, 0));
        SELECT coalesce(array_agg(DISTINCT mine), '{}') INTO v_mine_seats
        FROM buyer_seats(p_event_id, p_user_id) AS mine
        WHERE NOT (mine = ANY (p_seat_ids));
        IF (p_seat_limit > 0 AND cardinality(v_mine_seats) + cardinality(p_seat_ids) > p_seat_limit)
           OR EXISTS (
               SELECT 1
               FROM (SELECT category_id, count(*) AS wanted FROM unnest(v_limited) AS category_id GROUP BY category_id) req
               JOIN price_categories c ON c.id = req.category_id
               WHERE req.wanted + (SELECT count(*) FROM seats ms
                                   WHERE ms.id = ANY (v_mine_seats) AND ms.category_id = req.category_id) > c.seat_limit) THEN
            RETURN QUERY SELECT 'seat_limit', NULL::uuid[], NULL::timestamptz, NULL::bigint, NULL::text, NULL::bytea, NULL::jsonb;
            RETURN;
        END IF;
    END IF;

    -- Lock the seats in id order: two holds over overlapping seats take
    -- their locks in the same order and cannot deadlock. A seat's price is
    -- its category's (00035).
    SELECT count(*), sum(locked.price_minor), min(locked.currency)
    INTO v_count, v_amount, v_currency
    FROM (
        SELECT c.price_minor, e.currency
        FROM seats s JOIN events e ON e.id = s.event_id
        JOIN price_categories c ON c.id = s.category_id
        WHERE s.id = ANY (p_seat_ids) AND s.event_id IS NOT DISTINCT FROM p_event_id
        ORDER BY s.id
        FOR UPDATE OF s
    ) locked;
    IF v_count <> cardinality(p_seat_ids) THEN
        RETURN QUERY SELECT 'seats_not_in_event', NULL::uuid[], NULL::timestamptz, NULL::bigint, NULL::text, NULL::bytea, NULL::jsonb;
        RETURN;
    END IF;

    -- Reclaim, under the locks, seats of active holds past their expiry.
    -- Confirmed holds are never reclaimed, whatever their expiry says.
    UPDATE hold_seats hs SET released_at = now()
    FROM holds h
    WHERE h.id = hs.hold_id
      AND hs.seat_id = ANY (p_seat_ids)
      AND hs.released_at IS NULL
      AND h.status = 'active'
      AND h.expires_at <= now();

    SELECT array_agg(t.seat_id ORDER BY t.seat_id) INTO v_taken
    FROM (
        SELECT hs.seat_id FROM hold_seats hs WHERE hs.seat_id = ANY (p_seat_ids) AND hs.released_at IS NULL
        UNION
        -- A live ticket owns its seat; a revoked one keeps it off sale
        -- unless its refund released it for resale.
        SELECT tk.seat_id FROM tickets tk
        WHERE tk.seat_id = ANY (p_seat_ids) AND (tk.revoked_at IS NULL OR tk.resale_at IS NULL)
        UNION
        -- A seat the organizer blocked (00036) is off sale: blocks are
        -- written and released under the same seat locks, so this sees
        -- every block committed before we took them.
        SELECT b.seat_id FROM seat_blocks b WHERE b.seat_id = ANY (p_seat_ids)
    ) t;
    IF v_taken IS NOT NULL THEN
        -- Perhaps taken by a concurrent twin of this very request, which
        -- held the seat locks until it committed: this statement's snapshot
        -- sees its key.
        SELECT k.request_hash, jsonb_set(k.response, '{status}', to_jsonb(o.status)) INTO v_hash, v_response
        FROM idempotency_keys k JOIN orders o ON o.id = k.order_id
        WHERE k.user_id = p_user_id AND k.key = p_key;
        IF FOUND THEN
            RETURN QUERY SELECT 'replay', NULL::uuid[], NULL::timestamptz, NULL::bigint, NULL::text, v_hash, v_response;
            RETURN;
        END IF;
        RETURN QUERY SELECT 'seats_taken', v_taken, NULL::timestamptz, NULL::bigint, NULL::text, NULL::bytea, NULL::jsonb;
        RETURN;
    END IF;

    INSERT INTO orders (id, user_id, event_id, status, amount_minor, currency, correlation_id, trace_parent)
    VALUES (p_order_id, p_user_id, p_event_id, 'pending_payment', v_amount, v_currency, p_correlation_id, p_trace_parent);

    INSERT INTO idempotency_keys (user_id, key, request_hash, order_id, response, expires_at)
    VALUES (p_user_id, p_key, p_request_hash, p_order_id,
            jsonb_build_object('order_id', p_order_id, 'hold_id', p_hold_id,
                               'status', 'pending_payment', 'expires_at', v_expires),
            now() + p_key_ttl)
    ON CONFLICT (user_id, key) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idempotency key claimed concurrently' USING ERRCODE = 'BX001';
    END IF;

    INSERT INTO holds (id, order_id, status, expires_at)
    VALUES (p_hold_id, p_order_id, 'active', v_expires);

    INSERT INTO hold_seats (hold_id, seat_id)
    SELECT p_hold_id, seat FROM unnest(p_seat_ids) AS seat;

    -- The HoldCreated envelope (docs/design/outbox.md) and, caused by it, the
    -- PaymentAuthorizationRequested that asks the payments consumer for the
    -- order's PaymentIntent, in one statement (HoldCreated gets the lower
    -- seq). outbox.Envelope, outbox.HoldCreated and
    -- outbox.PaymentAuthorizationRequested are their Go form, and a test
    -- holds them together. The second envelope is what the saga's emit
    -- wrote when it still read HoldCreated: same correlation_id, the
    -- HoldCreated event id as causation_id.
    INSERT INTO outbox (id, subject, event_type, aggregate_id, trace_parent, envelope)
    VALUES (p_outbox_id, 'ticketing.order.HoldCreated', 'HoldCreated', p_order_id, p_trace_parent, json_build_object(
        'event_id', p_outbox_id,
        'event_type', 'HoldCreated',
        'schema_version', 1,
        'aggregate_type', 'order',
        'aggregate_id', p_order_id,
        'occurred_at', now(),
        'correlation_id', p_correlation_id,
        'payload', json_build_object(
            'order_id', p_order_id,
            'hold_id', p_hold_id,
            'event_id', p_event_id,
            'user_id', p_user_id,
            'seat_ids', (SELECT array_agg(seat ORDER BY seat) FROM unnest(p_seat_ids) AS seat),
            'amount_minor', v_amount,
            'currency', v_currency,
            'expires_at', v_expires))),
    (p_authorization_id, 'ticketing.order.PaymentAuthorizationRequested', 'PaymentAuthorizationRequested', p_order_id, p_trace_parent, json_build_object(
        'event_id', p_authorization_id,
        'event_type', 'PaymentAuthorizationRequested',
        'schema_version', 1,
        'aggregate_type', 'order',
        'aggregate_id', p_order_id,
        'occurred_at', now(),
        'correlation_id', p_correlation_id,
        'causation_id', p_outbox_id::text,
        'payload', json_build_object(
            'order_id', p_order_id,
            'hold_id', p_hold_id,
            'amount_minor', v_amount,
            'currency', v_currency)));
    -- Their rows of the order's timeline (outbox_history, as OutboxInsert
    -- writes it for every other event).
    INSERT INTO outbox_history (aggregate_id, event_id, event_type, occurred_at, causation_id)
    VALUES (p_order_id, p_outbox_id, 'HoldCreated', now(), NULL),
           (p_order_id, p_authorization_id, 'PaymentAuthorizationRequested', now(), p_outbox_id::text);

    RETURN QUERY SELECT 'held', NULL::uuid[], v_expires, v_amount, v_currency, NULL::bytea, NULL::jsonb;
END
$$;
