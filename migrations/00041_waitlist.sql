-- A waitlist that offers returned seats (issue 30 item 5).
--
-- A waitlist_entries row is one buyer waiting for quantity seats of one
-- price category of a sold-out event. position (an identity) is the
-- waitlist order. An entry is waiting, then offered (seats reserved for
-- it until offer_expires_at), then accepted (the buyer held them: order_id
-- names the order), expired (the offer was not taken in time and passed
-- to the next entry) or left (the buyer left). A buyer has at most one
-- live (waiting or offered) entry per event.
--
-- An offer reserves its seats as seat_blocks rows with reason 'waitlist'
-- naming the entry: hold_reserve already counts a blocked seat as taken,
-- so nobody else can hold an offered seat, and the seat map and the
-- waiting room count it as unavailable. The organizer's own blocks keep
-- waitlist_entry_id NULL; the organizer can neither release nor re-block
-- nor issue a seat offered to a waitlist buyer.

-- +goose Up
CREATE TABLE waitlist_entries (
    id               uuid PRIMARY KEY,
    event_id         uuid NOT NULL REFERENCES events (id),
    category_id      uuid NOT NULL REFERENCES price_categories (id),
    user_id          uuid NOT NULL,
    quantity         integer NOT NULL CHECK (quantity BETWEEN 1 AND 8),
    position         bigint GENERATED ALWAYS AS IDENTITY,
    state            text NOT NULL DEFAULT 'waiting'
                     CHECK (state IN ('waiting', 'offered', 'accepted', 'expired', 'left')),
    offered_at       timestamptz,
    offer_expires_at timestamptz,
    order_id         uuid,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT waitlist_offer_times CHECK (state = 'waiting' OR state = 'left' OR offer_expires_at IS NOT NULL),
    CONSTRAINT waitlist_accepted_order CHECK ((state = 'accepted') = (order_id IS NOT NULL))
);
-- One live entry per buyer per event.
CREATE UNIQUE INDEX waitlist_entry_buyer_uq ON waitlist_entries (event_id, user_id) WHERE state IN ('waiting', 'offered');
-- The queue, in waitlist order.
CREATE INDEX waitlist_entry_queue_idx ON waitlist_entries (event_id, position) WHERE state = 'waiting';
-- The offers the sweeper ends.
CREATE INDEX waitlist_offer_expiry_idx ON waitlist_entries (offer_expires_at) WHERE state = 'offered';
CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON waitlist_entries
    FOR EACH STATEMENT EXECUTE FUNCTION region_fence();

ALTER TABLE seat_blocks
    DROP CONSTRAINT seat_blocks_reason_check,
    ADD CONSTRAINT seat_blocks_reason_check
        CHECK (reason IN ('kill', 'production', 'press', 'sponsor', 'house', 'other', 'waitlist')),
    ADD COLUMN waitlist_entry_id uuid REFERENCES waitlist_entries (id),
    ADD CONSTRAINT seat_block_waitlist CHECK ((reason = 'waitlist') = (waitlist_entry_id IS NOT NULL));
CREATE INDEX seat_block_waitlist_idx ON seat_blocks (waitlist_entry_id) WHERE waitlist_entry_id IS NOT NULL;

-- +goose Down
DROP INDEX seat_block_waitlist_idx;
ALTER TABLE seat_blocks
    DROP CONSTRAINT seat_block_waitlist,
    DROP COLUMN waitlist_entry_id,
    DROP CONSTRAINT seat_blocks_reason_check,
    ADD CONSTRAINT seat_blocks_reason_check
        CHECK (reason IN ('kill', 'production', 'press', 'sponsor', 'house', 'other'));
DROP TABLE waitlist_entries;
