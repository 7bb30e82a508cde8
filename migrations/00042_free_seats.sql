-- The free seats of every event, best first (issue 30 item 4): what a
-- best-available pick reads, so that finding the best free seats of a
-- category is one index range scan over free seats only, however much of
-- the category is sold, instead of three ownership probes for every seat
-- walked past (docs/performance.md, "Best available against named seats").
--
-- What a row means: the seat has no owner — no unreleased hold_seats row,
-- no ticket that keeps it (a live one, or a revoked one not released for
-- resale), no seat_blocks row (an organizer's block or a waitlist offer).
-- That is the ownership hold_reserve checks, with one difference: a seat
-- of an active hold past its expiry is not free here until the expiry
-- worker releases it (seconds later), while hold_reserve reclaims it at
-- once. The table is a proposal, never trusted: a pick locks the seats it
-- proposes and hold_reserve checks every one again under the locks, so a
-- row out of date can cost a pick a retry, never a double hold.
--
-- Who writes it: nobody but the triggers below, in the transaction of the
-- write that changes a seat's owners, so no writer of seat ownership can
-- forget it (hold_reserve, the saga's releases, the expiry worker,
-- tickets, refunds with resale, blocks, comps, waitlist offers):
--   * a seat taken (hold_seats, tickets or seat_blocks inserted) leaves it:
--     one statement trigger per insert statement, a delete through the
--     primary key — a heap delete, no index write, the seat row untouched
--     (a flag on seats would rewrite the seat into every index of seats:
--     a fifth more database per purchase, measured);
--   * a seat given back (a hold row released, a ticket released for
--     resale, a block or offer deleted, an owning row deleted by hand)
--     comes back if it has no other
--     owner, as a row trigger whose WHEN is checked without a call when
--     no row changes (hold_reserve's reclaim of expired seats runs on
--     every hold);
--   * seats created come in (statement trigger on seats, COPY included);
--     a seat's score or category changed is copied.
-- Every owner write already happens under the seat's row lock or after
-- the release it needs has committed (hold_reserve, the releases and the
-- blocks lock the seats), so a take always sees the release it follows.
-- Seats are never deleted. The audit check free_seats_agree holds the
-- table to the owners.
--
-- Not fenced (region_fence): every write to it comes from a trigger of a
-- fenced table, whose BEFORE statement fence has already refused a stale
-- region's write.
--
-- The pick's index: free_seat_pick_idx, a category's free seats best
-- first (the pick finds runs of adjacent seats among the best of them,
-- so it needs no index by row). It replaces seat_category_pick_idx and
-- seat_row_idx on seats (00040), which only the pick read.

-- +goose Up
CREATE TABLE free_seats (
    seat_id     uuid PRIMARY KEY,
    event_id    uuid NOT NULL,
    category_id uuid NOT NULL,
    score       integer NOT NULL,
    position    integer NOT NULL,
    section     text NOT NULL,
    seat_row    text,
    seat_number integer
);
CREATE INDEX free_seat_pick_idx ON free_seats (event_id, category_id, score DESC, position);

INSERT INTO free_seats (seat_id, event_id, category_id, score, position, section, seat_row, seat_number)
SELECT s.id, s.event_id, s.category_id, s.score, s.position, s.section, s.seat_row, s.seat_number
FROM seats s
WHERE NOT EXISTS (SELECT 1 FROM hold_seats hs WHERE hs.seat_id = s.id AND hs.released_at IS NULL)
  AND NOT EXISTS (SELECT 1 FROM tickets t WHERE t.seat_id = s.id AND (t.revoked_at IS NULL OR t.resale_at IS NULL))
  AND NOT EXISTS (SELECT 1 FROM seat_blocks b WHERE b.seat_id = s.id);

DROP INDEX seat_category_pick_idx;
DROP INDEX seat_row_idx;
-- The pick's test of one seat (functions/seat_free.sql, 00040), which
-- free_seats replaces.
DROP FUNCTION IF EXISTS seat_free(uuid);

-- A seat taken: the inserted rows (transition table "taken", a seat_id
-- column) leave free_seats. The ids go to the index as an array, so the
-- plan cached by the first call is an index scan whatever its size.
-- +goose StatementBegin
CREATE FUNCTION free_seats_take() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM free_seats f WHERE f.seat_id = ANY (ARRAY(SELECT t.seat_id FROM taken t));
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- A seat given back (one row): it comes back if nothing else owns it.
-- +goose StatementBegin
CREATE FUNCTION free_seats_put_back() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_seat uuid;
BEGIN
    IF TG_OP = 'DELETE' THEN
        v_seat := OLD.seat_id;
    ELSE
        v_seat := NEW.seat_id;
    END IF;
    -- The ticket first: on the path every sold seat takes (tickets issued,
    -- then the hold's rows released) it owns the seat, and one probe ends
    -- the call.
    IF EXISTS (SELECT 1 FROM tickets t WHERE t.seat_id = v_seat AND (t.revoked_at IS NULL OR t.resale_at IS NULL))
       OR EXISTS (SELECT 1 FROM hold_seats hs WHERE hs.seat_id = v_seat AND hs.released_at IS NULL)
       OR EXISTS (SELECT 1 FROM seat_blocks b WHERE b.seat_id = v_seat) THEN
        RETURN NULL;
    END IF;
    INSERT INTO free_seats (seat_id, event_id, category_id, score, position, section, seat_row, seat_number)
    SELECT s.id, s.event_id, s.category_id, s.score, s.position, s.section, s.seat_row, s.seat_number
    FROM seats s
    WHERE s.id = v_seat
    ON CONFLICT (seat_id) DO NOTHING;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- Seats created are free; a seat's score or category follows it.
-- +goose StatementBegin
CREATE FUNCTION free_seats_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO free_seats (seat_id, event_id, category_id, score, position, section, seat_row, seat_number)
    SELECT a.id, a.event_id, a.category_id, a.score, a.position, a.section, a.seat_row, a.seat_number
    FROM added a
    ON CONFLICT (seat_id) DO NOTHING;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION free_seats_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE free_seats f SET score = c.score, category_id = c.category_id
    FROM changed c
    WHERE f.seat_id = c.id AND (f.score, f.category_id) IS DISTINCT FROM (c.score, c.category_id);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER free_seats_take AFTER INSERT ON hold_seats
    REFERENCING NEW TABLE AS taken FOR EACH STATEMENT EXECUTE FUNCTION free_seats_take();
CREATE TRIGGER free_seats_take AFTER INSERT ON tickets
    REFERENCING NEW TABLE AS taken FOR EACH STATEMENT EXECUTE FUNCTION free_seats_take();
CREATE TRIGGER free_seats_take AFTER INSERT ON seat_blocks
    REFERENCING NEW TABLE AS taken FOR EACH STATEMENT EXECUTE FUNCTION free_seats_take();

CREATE TRIGGER free_seats_put_back AFTER UPDATE OF released_at ON hold_seats
    FOR EACH ROW WHEN (OLD.released_at IS NULL AND NEW.released_at IS NOT NULL)
    EXECUTE FUNCTION free_seats_put_back();
CREATE TRIGGER free_seats_put_back AFTER UPDATE OF resale_at ON tickets
    FOR EACH ROW WHEN (OLD.resale_at IS NULL AND NEW.resale_at IS NOT NULL)
    EXECUTE FUNCTION free_seats_put_back();
CREATE TRIGGER free_seats_put_back AFTER DELETE ON seat_blocks
    FOR EACH ROW EXECUTE FUNCTION free_seats_put_back();
-- No product path deletes hold rows or tickets; an operator's delete of
-- an owning one gives the seat back all the same.
CREATE TRIGGER free_seats_put_back_deleted AFTER DELETE ON hold_seats
    FOR EACH ROW WHEN (OLD.released_at IS NULL) EXECUTE FUNCTION free_seats_put_back();
CREATE TRIGGER free_seats_put_back_deleted AFTER DELETE ON tickets
    FOR EACH ROW WHEN (OLD.revoked_at IS NULL OR OLD.resale_at IS NULL) EXECUTE FUNCTION free_seats_put_back();

CREATE TRIGGER free_seats_add AFTER INSERT ON seats
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION free_seats_add();
CREATE TRIGGER free_seats_follow AFTER UPDATE ON seats
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION free_seats_follow();

-- +goose Down
DROP TRIGGER free_seats_follow ON seats;
DROP TRIGGER free_seats_add ON seats;
DROP TRIGGER free_seats_put_back_deleted ON tickets;
DROP TRIGGER free_seats_put_back_deleted ON hold_seats;
DROP TRIGGER free_seats_put_back ON seat_blocks;
DROP TRIGGER free_seats_put_back ON tickets;
DROP TRIGGER free_seats_put_back ON hold_seats;
DROP TRIGGER free_seats_take ON seat_blocks;
DROP TRIGGER free_seats_take ON tickets;
DROP TRIGGER free_seats_take ON hold_seats;
DROP FUNCTION free_seats_follow();
DROP FUNCTION free_seats_add();
DROP FUNCTION free_seats_put_back();
DROP FUNCTION free_seats_take();
CREATE INDEX seat_category_pick_idx ON seats (event_id, category_id, score DESC, position);
CREATE INDEX seat_row_idx ON seats (event_id, section, seat_row);
DROP TABLE free_seats;
-- +goose StatementBegin
CREATE FUNCTION seat_free(p_seat_id uuid) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (SELECT 1 FROM hold_seats hs JOIN holds h ON h.id = hs.hold_id
                       WHERE hs.seat_id = p_seat_id AND hs.released_at IS NULL
                         AND (h.status <> 'active' OR h.expires_at > now()))
       AND NOT EXISTS (SELECT 1 FROM tickets t
                       WHERE t.seat_id = p_seat_id AND (t.revoked_at IS NULL OR t.resale_at IS NULL))
       AND NOT EXISTS (SELECT 1 FROM seat_blocks b WHERE b.seat_id = p_seat_id)
$$;
-- +goose StatementEnd
