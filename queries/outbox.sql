-- name: OutboxInsert :exec
-- Writes one event to the outbox; call it in the transaction of the state
-- change the event describes.
INSERT INTO outbox (id, subject, event_type, aggregate_id, envelope)
VALUES (@id::uuid, @subject::text, @event_type::text, @aggregate_id::uuid, @envelope::json);
