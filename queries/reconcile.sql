-- name: ReconcileOrder :one
-- What reconciliation compares a PaymentIntent with: the order, whether a
-- cancel was requested, how many tickets it has, and how long it has been
-- in its status (by the database clock).
SELECT o.status, o.correlation_id,
       (now() - o.updated_at)::interval AS in_status_for,
       (o.authorization_cancel_requested_at IS NOT NULL)::boolean AS cancel_requested,
       (SELECT count(*) FROM tickets t WHERE t.order_id = o.id)::bigint AS tickets
FROM orders o
WHERE o.id = @order_id::uuid;

-- name: ReconcileRepairRecord :execrows
-- Records a repair; 0 when this intent already had this repair.
INSERT INTO reconcile_repairs (payment_intent_id, repair, order_id, event_id)
VALUES (@payment_intent_id::text, @repair::text, @order_id::uuid, @event_id::uuid)
ON CONFLICT DO NOTHING;
