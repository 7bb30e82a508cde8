package purchase

import (
	"bytes"
	"context"
	"slices"

	"github.com/google/uuid"

	"boxoffice/platform/fault"
)

// ErrKeyUnknown: no request of this user bound this Idempotency-Key (or it
// was forgotten after Config.KeyTTL), so there is nothing to replay.
var ErrKeyUnknown = fault.New(fault.CodeNotFound, "idempotency key not bound")

// Replay answers a retried hold from its Idempotency-Key alone, without
// holding anything: the hold the key's first request made, its Status the
// order's status now, Replayed. It is what a retry gets when it may no
// longer create a hold (its admission has expired or been revoked since the
// first request), so that a lost answer can still be recovered: invariant 3
// binds the answer to the user and the key, not to the admission.
//
// Returns ErrIdempotencyConflict when the key was bound by a different
// request (another event or other seats), ErrKeyUnknown when it is not
// bound: the caller must then refuse the request as it would have.
func (s *Service) Replay(ctx context.Context, p HoldParams) (Hold, error) {
	seatIDs := slices.Clone(p.SeatIDs)
	slices.SortFunc(seatIDs, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	h, found, err := s.replay(ctx, p, p.hash(seatIDs))
	switch {
	case err != nil:
		return Hold{}, err
	case !found:
		return Hold{}, ErrKeyUnknown
	}
	return h, nil
}
