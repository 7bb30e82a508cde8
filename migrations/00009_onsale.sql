-- +goose Up
-- An event's onsale settings, set by its organizer (issue 6). An event with
-- no row here is open, uncapped and unlimited: a new event's onsale is open
-- unless its organizer schedules or pauses it. The waiting room caches
-- these rows in memory for a second, so joins and polls never read them.
CREATE TABLE onsales (
    event_id   uuid PRIMARY KEY REFERENCES events (id),
    -- Before opens_at buyers gather in the pre-queue, shuffled at random
    -- when the onsale opens; NULL means open since the event was created.
    opens_at   timestamptz,
    -- A paused onsale queues buyers in arrival order and admits nobody.
    paused     boolean NOT NULL DEFAULT false,
    -- The organizer's cap on admissions per second; NULL: only the release
    -- controller limits the rate.
    max_rate   integer CHECK (max_rate IS NULL OR max_rate > 0),
    -- Seats one buyer may hold or own in this event; NULL: no limit beyond
    -- the 8 seats of one hold.
    seat_limit integer CHECK (seat_limit IS NULL OR seat_limit > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE onsales;
