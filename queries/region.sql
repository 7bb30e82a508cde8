-- name: RegionEpochGet :one
SELECT epoch FROM region_epoch;

-- name: RegionEpochRaise :one
-- Raises the epoch to @epoch, never lowers it, and returns the epoch now in
-- force: @epoch when it was raised (or already there), the higher current
-- one when it was not.
UPDATE region_epoch
SET epoch = greatest(epoch, @epoch::bigint),
    raised_at = CASE WHEN epoch < @epoch::bigint THEN now() ELSE raised_at END
RETURNING epoch;
