-- name: InboxInsert :one
-- Records that consumer applied event_id. Returns false when it already
-- had: the caller must then skip the effect. Call it in the transaction of
-- the consumer's effect.
WITH inserted AS (
    INSERT INTO inbox (consumer, event_id) VALUES (@consumer::text, @event_id::uuid)
    ON CONFLICT (consumer, event_id) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM inserted) AS first_time;

-- name: InboxExists :one
-- Reports whether consumer has applied event_id already. A consumer that
-- calls out before its transaction reads it first, to skip the call for a
-- redelivery; InboxInsert in the transaction stays the guard.
SELECT EXISTS (
    SELECT 1 FROM inbox WHERE consumer = @consumer::text AND event_id = @event_id::uuid
) AS applied;
