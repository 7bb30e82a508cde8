package purchase_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
	"boxoffice/platform/fault"
)

// seatLimits is a purchase.OnsaleRules that answers limit and ttl, or err.
type seatLimits struct {
	limit int
	ttl   time.Duration
	err   error
	asked []uuid.UUID
}

func (s *seatLimits) CheckoutRules(_ context.Context, eventID uuid.UUID) (purchase.CheckoutRules, error) {
	s.asked = append(s.asked, eventID)
	return purchase.CheckoutRules{SeatLimit: s.limit, HoldTTL: s.ttl}, s.err
}

// Checkout holds within the limit it reads for the event, and holds
// nothing when the limit cannot be read.
func TestCheckoutHoldsWithinTheEventsSeatLimit(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	ctx := context.Background()
	buyer := uuid.New()
	params := func(seats ...uuid.UUID) purchase.HoldParams {
		// SeatLimit is what limits says, whatever the caller set.
		return purchase.HoldParams{UserID: buyer, EventID: b.event.ID, SeatIDs: seats, IdempotencyKey: uuid.NewString(), SeatLimit: 100}
	}

	down := errors.New("settings store down")
	_, err := svc.Checkout(ctx, &seatLimits{err: down}, params(b.seats[0]))
	require.ErrorIs(t, err, purchase.ErrSeatLimitUnknown)
	require.ErrorIs(t, err, down, "the reader's error stays inspectable")
	require.Equal(t, fault.CodeUnavailable, fault.CodeOf(err))

	limits := &seatLimits{limit: 1}
	h, err := svc.Checkout(ctx, limits, params(b.seats[0]))
	require.NoError(t, err)
	require.NotEqual(t, uuid.Nil, h.OrderID)
	require.Equal(t, []uuid.UUID{b.event.ID}, limits.asked)
	_, err = svc.Checkout(ctx, limits, params(b.seats[1]))
	require.ErrorIs(t, err, purchase.ErrSeatLimit, "the limit read is the one the hold enforces")

	h, err = svc.Checkout(ctx, &seatLimits{}, params(b.seats[1], b.seats[2]))
	require.NoError(t, err, "0 is no limit")
	require.WithinDuration(t, time.Now().Add(7*time.Minute), h.ExpiresAt, 30*time.Second, "0 is the service's hold lifetime")

	// The event's hold lifetime is the hold's.
	h, err = svc.Checkout(ctx, &seatLimits{ttl: 90 * time.Second}, params(b.seats[3]))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(90*time.Second), h.ExpiresAt, 30*time.Second)
}
