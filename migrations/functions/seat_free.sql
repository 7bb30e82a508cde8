-- seat_free: whether seat p_seat_id is free to be held now, as
-- hold_reserve decides under the seat's lock: no unreleased seat of a hold
-- that is confirmed or active and not past its expiry (an expired one is
-- reclaimed by the next hold), no ticket that keeps the seat (a live one,
-- or a revoked one whose refund did not release it for resale), no block
-- of the organizer (00036). Read without the lock it is a hint, which is
-- how hold_best_available uses it: to propose seats that hold_reserve then
-- checks under their locks.
--
-- This file is the function's only definition.
CREATE OR REPLACE FUNCTION seat_free(p_seat_id uuid)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (SELECT 1 FROM hold_seats hs JOIN holds h ON h.id = hs.hold_id
                       WHERE hs.seat_id = p_seat_id AND hs.released_at IS NULL
                         AND (h.status <> 'active' OR h.expires_at > now()))
       AND NOT EXISTS (SELECT 1 FROM tickets t
                       WHERE t.seat_id = p_seat_id AND (t.revoked_at IS NULL OR t.resale_at IS NULL))
       AND NOT EXISTS (SELECT 1 FROM seat_blocks b WHERE b.seat_id = p_seat_id)
$$;
