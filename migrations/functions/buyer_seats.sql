-- buyer_seats: the seats p_user_id holds or owns in event p_event_id — an
-- unreleased seat of a live or confirmed hold, or a ticket of a ticketed
-- order — which is what every per-buyer seat limit counts: the
-- organizer's per-event limit, a price category's limit and a presale
-- code's (over all of the code's buyers). hold_reserve calls it under the
-- lock that makes the count hold until its commit; a seat may appear
-- twice (held by one order, ticketed to it), so count it DISTINCT.
--
-- This file is the function's only definition (migrations.Up applies
-- functions/ in name order, before hold_reserve.sql).
CREATE OR REPLACE FUNCTION buyer_seats(p_event_id uuid, p_user_id uuid)
RETURNS SETOF uuid
LANGUAGE sql STABLE AS $$
    SELECT hs.seat_id
    FROM orders o
    JOIN holds h ON h.order_id = o.id
    JOIN hold_seats hs ON hs.hold_id = h.id
    WHERE o.user_id = p_user_id AND o.event_id = p_event_id
      AND hs.released_at IS NULL
      AND (h.status = 'confirmed' OR (h.status = 'active' AND h.expires_at > now()))
    UNION ALL
    SELECT t.seat_id
    FROM orders o
    JOIN tickets t ON t.order_id = o.id
    WHERE o.user_id = p_user_id AND o.event_id = p_event_id AND o.status = 'ticketed'
$$;
