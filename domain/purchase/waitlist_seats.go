package purchase

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/sqlcgen"
)

// The seats of waitlist offers (issue 30 item 5). An offer reserves its
// seats as seat_blocks rows naming the waitlist entry, written under the
// seat locks a hold takes, after checking nobody holds, owns or blocks
// them: hold_reserve counts a blocked seat as taken, so while the offer
// lives nobody else can hold its seats, and the organizer can neither
// block, release nor issue them (SeatOwnedList). The waitlist (package
// waitlist) decides who is offered what; this file only moves seats.

// HasFreeSeat reports whether some seat of the event's category is free:
// not held by a live hold, not owned by a ticket, not blocked.
func HasFreeSeat(ctx context.Context, q sqlcgen.DBTX, eventID, categoryID uuid.UUID) (bool, error) {
	free, err := sqlcgen.New().SeatFreeInCategory(ctx, q, sqlcgen.SeatFreeInCategoryParams{
		EventID: eventID, CategoryID: categoryID, Skip: []uuid.UUID{}, Max: 1,
	})
	if err != nil {
		return false, fmt.Errorf("read free seats: %w", err)
	}
	return len(free) > 0, nil
}

// ReserveOfferSeats reserves n free seats of the event's category, the
// first in seat map order, for the waitlist entry entryID of userID, in
// tx, and returns them in id order; or ErrNotEnoughSeats, with nothing
// written. It reads candidates, locks them in id order (as every hold
// does), reclaims seats of expired holds and checks again under the locks
// (a concurrent hold, block or offer may have taken one: it reads others,
// a few times).
func ReserveOfferSeats(ctx context.Context, tx pgx.Tx, eventID, categoryID, entryID, userID uuid.UUID, n int) ([]uuid.UUID, error) {
	q := sqlcgen.New()
	chosen := []uuid.UUID{}
	skip := []uuid.UUID{}
	for range 4 {
		more, err := q.SeatFreeInCategory(ctx, tx, sqlcgen.SeatFreeInCategoryParams{
			EventID: eventID, CategoryID: categoryID, Skip: append(skip, chosen...), Max: int32(n - len(chosen)),
		})
		if err != nil {
			return nil, fmt.Errorf("read free seats: %w", err)
		}
		if len(more) < n-len(chosen) {
			return nil, ErrNotEnoughSeats
		}
		more = sortedSeats(more)
		if _, err := q.SeatLockForClaim(ctx, tx, sqlcgen.SeatLockForClaimParams{EventID: eventID, SeatIds: more}); err != nil {
			return nil, fmt.Errorf("lock seats: %w", err)
		}
		if err := q.HoldSeatReclaimExpired(ctx, tx, more); err != nil {
			return nil, fmt.Errorf("reclaim expired seats: %w", err)
		}
		owned, err := q.SeatOwnedList(ctx, tx, more)
		if err != nil {
			return nil, fmt.Errorf("check seats: %w", err)
		}
		blocked, err := q.SeatBlockedList(ctx, tx, more)
		if err != nil {
			return nil, fmt.Errorf("check seats: %w", err)
		}
		taken := map[uuid.UUID]bool{}
		for _, id := range append(owned, blocked...) {
			taken[id] = true
		}
		for _, id := range more {
			if taken[id] {
				skip = append(skip, id)
			} else {
				chosen = append(chosen, id)
			}
		}
		if len(chosen) == n {
			chosen = sortedSeats(chosen)
			if err := q.SeatBlockInsertOffer(ctx, tx, sqlcgen.SeatBlockInsertOfferParams{
				EventID: eventID, UserID: userID, EntryID: entryID, SeatIds: chosen,
			}); err != nil {
				return nil, fmt.Errorf("reserve offered seats: %w", err)
			}
			return chosen, nil
		}
	}
	// Seats kept being taken under us: the demand is elsewhere, the next
	// seat that returns starts another round.
	return nil, ErrNotEnoughSeats
}

// ReleaseOfferSeats ends the reservation of the waitlist entry entryID's
// offer in tx and returns its seats, in id order: they are free from the
// commit (or, in the same transaction, for the next offer or the hold of
// the accepted offer).
func ReleaseOfferSeats(ctx context.Context, tx pgx.Tx, entryID uuid.UUID) ([]uuid.UUID, error) {
	seats, err := sqlcgen.New().SeatBlockDeleteOffer(ctx, tx, entryID)
	if err != nil {
		return nil, fmt.Errorf("release offered seats: %w", err)
	}
	return sortedSeats(seats), nil
}

// HoldTx is Hold in the caller's transaction tx, for a hold that must
// commit or fail with the caller's other writes (the accepted waitlist
// offer). It runs hold_reserve, the same single statement with the same
// guarantees and outcomes; a concurrent twin of the request (same user
// and key) is an error here, not a replay, and lock races are the
// caller's to retry (db.Retry around its transaction).
func (s *Service) HoldTx(ctx context.Context, tx pgx.Tx, p HoldParams) (Hold, error) {
	if len(p.SeatIDs) == 0 {
		return Hold{}, ErrSeatsNotInEvent
	}
	seatIDs := sortedSeats(p.SeatIDs)
	return s.reserveOn(ctx, tx, p, seatIDs, requestHash(p.EventID, seatIDs))
}
