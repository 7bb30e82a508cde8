-- name: TicketListByOrder :many
SELECT * FROM tickets WHERE order_id = @order_id::uuid ORDER BY seat_id;
