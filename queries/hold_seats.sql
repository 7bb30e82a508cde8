-- name: HoldSeatListByHold :many
SELECT seat_id FROM hold_seats WHERE hold_id = @hold_id::uuid ORDER BY seat_id;
