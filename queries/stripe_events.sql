-- name: StripeEventInsert :one
-- Records a provider event id. Returns false when it was already recorded:
-- the event was handled before and must have no second effect.
WITH inserted AS (
    INSERT INTO stripe_events (id, type) VALUES (@id::text, @type::text)
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM inserted) AS first_time;
