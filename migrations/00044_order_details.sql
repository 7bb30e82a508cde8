-- order_details: a buyer's order as the API shows it — the order with its
-- hold, seats, payment, tickets and refunds, and the onsale's payment
-- attempts — in one row. It was the select list of OrderListForUser; it
-- is a view so that the one-order read (OrderGetForUser, by key: one
-- generic plan per session) and the list (OrderListForUser, whose
-- optional filters want custom plans) share one definition. Reading one
-- order through the list's optional filters left the plan cache choosing
-- between a custom plan per call and a generic plan by a narrow margin
-- (docs/performance.md, "Planned once per session").
--
-- PostgreSQL expands "o.*" when the view is created: a column added to
-- orders later reaches the view (and sqlc's OrderDetail) only when a
-- migration replaces the view.

-- +goose Up
CREATE VIEW order_details AS
SELECT o.*, h.id AS hold_id, h.status AS hold_status, h.expires_at AS hold_expires_at,
       h.payment_grace_at AS hold_payment_grace_at,
       coalesce(os.payment_attempts, 0)::int AS payment_attempts,
       ARRAY(SELECT hs.seat_id FROM hold_seats hs WHERE hs.hold_id = h.id ORDER BY hs.seat_id)::uuid[] AS seat_ids,
       p.provider AS payment_provider, p.status AS payment_status,
       p.payment_intent_id AS payment_intent_id, p.client_secret AS payment_client_secret,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('id', t.id, 'seat_id', t.seat_id, 'issued_at', t.issued_at,
                                                     'revoked_at', t.revoked_at, 'qr_payload', t.qr_payload)
                                  ORDER BY t.seat_id), '[]')
        FROM tickets t WHERE t.order_id = o.id)::jsonb AS tickets,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('id', r.id, 'ticket_ids', r.ticket_ids, 'amount_minor', r.amount_minor,
                                                     'status', r.status, 'requested_at', r.requested_at,
                                                     'succeeded_at', r.succeeded_at)
                                  ORDER BY r.cumulative_minor), '[]')
        FROM refunds r WHERE r.order_id = o.id)::jsonb AS refunds
FROM orders o
JOIN holds h ON h.order_id = o.id
LEFT JOIN onsales os ON os.event_id = o.event_id
LEFT JOIN payments p ON p.order_id = o.id;

-- +goose Down
DROP VIEW order_details;
