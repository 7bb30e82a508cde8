-- onsale_phase_in_force: the phase of p_event_id's onsale in force now
-- (00039): the latest opened, or before any has opened the first; no row
-- for an event without phases. waitingroom.InForce decides the same way
-- in Go. hold_reserve applies the phase's rules; hold_best_available reads
-- it to take the presale code's lock before it locks seats, in the order
-- hold_reserve takes its locks.
--
-- This file is the function's only definition.
CREATE OR REPLACE FUNCTION onsale_phase_in_force(p_event_id uuid)
RETURNS SETOF onsale_phases
LANGUAGE sql STABLE AS $$
    SELECT * FROM onsale_phases ph
    WHERE ph.event_id = p_event_id
    ORDER BY (ph.opens_at <= now()) DESC,
             CASE WHEN ph.opens_at <= now() THEN ph.opens_at END DESC,
             ph.opens_at
    LIMIT 1
$$;
