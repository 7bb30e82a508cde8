package purchase_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"boxoffice/domain/catalog"
	"boxoffice/domain/purchase"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/dbtest"
)

func (b *testBundle) block(ctx context.Context, svc *purchase.Service, seats ...uuid.UUID) error {
	return svc.BlockSeats(ctx, purchase.BlockSeatsParams{
		OrganizerID: b.event.OrganizerID, UserID: uuid.New(), EventID: b.event.ID, SeatIDs: seats, Reason: purchase.BlockPress,
	})
}

func (b *testBundle) comp(ctx context.Context, svc *purchase.Service, seats ...uuid.UUID) (purchase.IssuedOrder, error) {
	return svc.IssueOrder(ctx, purchase.IssueOrderParams{
		OrganizerID: b.event.OrganizerID, EventID: b.event.ID, RecipientID: uuid.New(), SeatIDs: seats,
		Channel: purchase.ChannelComp, CorrelationID: "comp",
	})
}

func (b *testBundle) buyerHold(ctx context.Context, svc *purchase.Service, seats ...uuid.UUID) (purchase.Hold, error) {
	return svc.Hold(ctx, purchase.HoldParams{
		UserID: uuid.New(), EventID: b.event.ID, SeatIDs: seats, IdempotencyKey: uuid.NewString(), CorrelationID: "buyer",
	})
}

// requireOneOwner checks the invariant the audit checks too: no blocked
// seat is owned by an unreleased hold or a live ticket, and no seat has
// two unreleased hold rows.
func requireOneOwner(t *testing.T, b *testBundle) {
	t.Helper()
	require.Zero(t, dbtest.Count(t, b.pool, `SELECT count(*) FROM seat_blocks bl
		JOIN hold_seats hs ON hs.seat_id = bl.seat_id AND hs.released_at IS NULL`), "a block beside a hold")
	require.Zero(t, dbtest.Count(t, b.pool, `SELECT count(*) FROM (SELECT seat_id FROM hold_seats
		WHERE released_at IS NULL GROUP BY seat_id HAVING count(*) > 1) x`), "two holds on one seat")
}

// race runs a and b at once, released by one signal, and returns their
// errors.
func race(a, b func() error) (errA, errB error) {
	start := make(chan struct{})
	var g errgroup.Group
	g.Go(func() error { <-start; errA = a(); return nil })
	g.Go(func() error { <-start; errB = b(); return nil })
	close(start)
	_ = g.Wait()
	return errA, errB
}

// A block and a buyer's hold racing for the same seats: both take the
// seat locks first, so exactly one wins, the loser is told the seats are
// unavailable, and a block never coexists with the hold. Rounds over
// fresh seats give both orders of arrival their chance.
func TestBlockRacesHold(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	ctx := context.WithoutCancel(t.Context())
	wins := map[string]int{}
	for round := range 10 {
		seats := []uuid.UUID{b.seats[2*round], b.seats[2*round+1]}
		blockErr, holdErr := race(
			func() error { return b.block(ctx, svc, seats...) },
			func() error { _, err := b.buyerHold(ctx, svc, seats[1], seats[0]); return err },
		)
		var unavailable *purchase.SeatUnavailableError
		switch {
		case blockErr == nil && holdErr == nil:
			t.Fatalf("round %d: both the block and the hold got the seats", round)
		case blockErr == nil:
			wins["block"]++
			require.ErrorAs(t, holdErr, &unavailable)
		case holdErr == nil:
			wins["hold"]++
			require.ErrorAs(t, blockErr, &unavailable)
		default:
			t.Fatalf("round %d: neither won: %v, %v", round, blockErr, holdErr)
		}
		requireOneOwner(t, b)
	}
	t.Logf("wins: %v", wins)
}

// A comp and a buyer's hold racing for one seat: exactly one owns it.
func TestCompRacesHold(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	ctx := context.WithoutCancel(t.Context())
	for round := range 10 {
		seat := b.seats[round]
		if round%2 == 1 {
			require.NoError(t, b.block(ctx, svc, seat), "odd rounds comp a blocked seat")
		}
		compErr, holdErr := race(
			func() error { _, err := b.comp(ctx, svc, seat); return err },
			func() error { _, err := b.buyerHold(ctx, svc, seat); return err },
		)
		if round%2 == 1 {
			require.NoError(t, compErr, "a blocked seat is the organizer's: no buyer can hold it")
			var unavailable *purchase.SeatUnavailableError
			require.ErrorAs(t, holdErr, &unavailable)
		} else {
			require.True(t, (compErr == nil) != (holdErr == nil), "round %d: exactly one of comp (%v) and hold (%v)", round, compErr, holdErr)
		}
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM hold_seats WHERE seat_id = $1 AND released_at IS NULL", seat))
		requireOneOwner(t, b)
	}
}

func TestSeatBlocks(t *testing.T) {
	t.Parallel()

	t.Run("BlockedSeatCannotBeHeldUntilReleased", func(t *testing.T) {
		t.Parallel()
		svc, b := setup(t)
		ctx := t.Context()
		require.NoError(t, b.block(ctx, svc, b.seats[0], b.seats[1]))
		_, err := b.buyerHold(ctx, svc, b.seats[1], b.seats[2])
		var unavailable *purchase.SeatUnavailableError
		require.ErrorAs(t, err, &unavailable)
		require.Equal(t, []uuid.UUID{b.seats[1]}, unavailable.SeatIDs)

		inv, err := catalog.New(b.pool).Inventory(ctx, b.event.ID)
		require.NoError(t, err)
		require.Equal(t, 2, inv.Blocked)
		require.Equal(t, len(b.seats)-2, inv.Available())
		m, err := catalog.New(b.pool).SeatMap(ctx, b.event.ID)
		require.NoError(t, err)
		for _, s := range m.Seats {
			if s.ID == b.seats[0] {
				require.Equal(t, "sold", s.Status, "a blocked seat shows as unavailable")
			}
		}
		s, err := svc.Sales(ctx, b.event.OrganizerID, b.event.ID)
		require.NoError(t, err)
		require.Equal(t, 2, s.Seats.Blocked)
		require.Equal(t, len(b.seats)-2, s.Seats.Available)

		released, err := svc.ReleaseSeats(ctx, b.event.OrganizerID, b.event.ID, []uuid.UUID{b.seats[1], b.seats[5]})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{b.seats[1]}, released)
		_, err = b.buyerHold(ctx, svc, b.seats[1], b.seats[2])
		require.NoError(t, err)
		blocks, err := svc.SeatBlocks(ctx, b.event.OrganizerID, b.event.ID)
		require.NoError(t, err)
		require.Len(t, blocks, 1)
		require.Equal(t, purchase.BlockPress, blocks[0].Reason)
	})

	t.Run("HeldOrSoldSeatsCannotBeBlockedOrComped", func(t *testing.T) {
		t.Parallel()
		svc, b := setup(t)
		ctx := t.Context()
		_, err := b.buyerHold(ctx, svc, b.seats[0])
		require.NoError(t, err)
		_, err = b.comp(ctx, svc, b.seats[1])
		require.NoError(t, err)
		for _, seat := range []uuid.UUID{b.seats[0], b.seats[1]} {
			var unavailable *purchase.SeatUnavailableError
			require.ErrorAs(t, b.block(ctx, svc, seat, b.seats[3]), &unavailable)
			require.Equal(t, []uuid.UUID{seat}, unavailable.SeatIDs)
			_, err := b.comp(ctx, svc, seat)
			require.ErrorAs(t, err, &unavailable)
		}
		require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM seat_blocks"), "all or none")
	})

	t.Run("AnotherOrganizersEventIsNotFound", func(t *testing.T) {
		t.Parallel()
		svc, b := setup(t)
		ctx := t.Context()
		err := svc.BlockSeats(ctx, purchase.BlockSeatsParams{
			OrganizerID: uuid.New(), EventID: b.event.ID, SeatIDs: b.seats[:1], Reason: purchase.BlockKill,
		})
		require.ErrorIs(t, err, purchase.ErrEventNotFound)
		_, err = svc.IssueOrder(ctx, purchase.IssueOrderParams{
			OrganizerID: uuid.New(), EventID: b.event.ID, SeatIDs: b.seats[:1], Channel: purchase.ChannelComp, RecipientID: uuid.New(),
		})
		require.ErrorIs(t, err, purchase.ErrEventNotFound)
		_, err = svc.ReleaseSeats(ctx, uuid.New(), b.event.ID, b.seats[:1])
		require.ErrorIs(t, err, purchase.ErrEventNotFound)
		_, err = svc.SeatBlocks(ctx, uuid.New(), b.event.ID)
		require.ErrorIs(t, err, purchase.ErrEventNotFound)
	})

	t.Run("SeatsOfAnotherEventAreRefused", func(t *testing.T) {
		t.Parallel()
		svc, b := setup(t)
		require.ErrorIs(t, b.block(t.Context(), svc, b.seats[0], uuid.New()), purchase.ErrSeatsNotInEvent)
	})
}

// An issued order takes the buyer's usual path from paid: OrderConfirmed
// then TicketIssueRequested with its seats, in the transaction that
// creates it; a box office sale keeps its reference and amount.
func TestIssueOrder(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	ctx := t.Context()
	require.NoError(t, b.block(ctx, svc, b.seats[0]))
	recipient := uuid.New()
	o, err := svc.IssueOrder(ctx, purchase.IssueOrderParams{
		OrganizerID: b.event.OrganizerID, EventID: b.event.ID, RecipientID: recipient,
		SeatIDs: []uuid.UUID{b.seats[1], b.seats[0]}, Channel: purchase.ChannelBoxOffice, AmountMinor: 4000,
		Reference: "till 3 receipt 42", CorrelationID: "box",
	})
	require.NoError(t, err)
	require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM seat_blocks"), "the block ends when its seat is issued")

	order, err := svc.Order(ctx, recipient, o.OrderID)
	require.NoError(t, err)
	require.Equal(t, purchase.OrderPaid, order.Status)
	require.Equal(t, int64(4000), order.AmountMinor)
	require.Equal(t, purchase.HoldConfirmed, order.HoldStatus)

	rows, err := b.pool.Query(ctx, "SELECT event_type, envelope FROM outbox WHERE aggregate_id = $1 ORDER BY seq", o.OrderID)
	require.NoError(t, err)
	var types []string
	for rows.Next() {
		var typ string
		var raw []byte
		require.NoError(t, rows.Scan(&typ, &raw))
		types = append(types, typ)
		if typ == outbox.TypeTicketIssueRequested {
			var env outbox.Envelope
			require.NoError(t, json.Unmarshal(raw, &env))
			var p outbox.TicketIssueRequested
			require.NoError(t, json.Unmarshal(env.Payload, &p))
			require.ElementsMatch(t, []uuid.UUID{b.seats[0], b.seats[1]}, p.SeatIDs)
			require.Equal(t, o.HoldID, p.HoldID)
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{outbox.TypeOrderConfirmed, outbox.TypeTicketIssueRequested}, types)

	orders, err := svc.EventOrders(ctx, b.event.OrganizerID, b.event.ID, purchase.OrderFilter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, orders, 1)
	require.Equal(t, purchase.ChannelBoxOffice, orders[0].Channel)
	require.Equal(t, "till 3 receipt 42", orders[0].Reference)
	s, err := svc.Sales(ctx, b.event.OrganizerID, b.event.ID)
	require.NoError(t, err)
	require.Equal(t, 1, s.OrdersByChannel[purchase.ChannelBoxOffice])
	require.Equal(t, int64(4000), s.BoxOfficeMinor)

	_, err = svc.IssueOrder(ctx, purchase.IssueOrderParams{
		OrganizerID: b.event.OrganizerID, EventID: b.event.ID, RecipientID: recipient,
		SeatIDs: []uuid.UUID{b.seats[5]}, Channel: purchase.ChannelBoxOffice,
	})
	require.ErrorIs(t, err, purchase.ErrBoxOfficeReference)

	_, err = svc.Refund(ctx, b.event.OrganizerID, o.OrderID, purchase.RefundOptions{TicketIDs: []uuid.UUID{uuid.New()}})
	require.ErrorIs(t, err, purchase.ErrOrderNotRefundable, "an issued order is voided whole")
}

// The organizer's refund of an order it issued voids it: nothing goes to
// the provider; a ticketed order's tickets are revoked (their seats back
// on sale with Resell, else kept off sale), a paid one's confirmed hold is
// released, and the order becomes canceled with OrderCanceled
// (voided_by_organizer), once however often it is asked.
func TestVoidIssuedOrder(t *testing.T) {
	t.Parallel()
	issue := func(t *testing.T, svc *purchase.Service, b *testBundle, seats ...uuid.UUID) purchase.IssuedOrder {
		t.Helper()
		o, err := svc.IssueOrder(t.Context(), purchase.IssueOrderParams{
			OrganizerID: b.event.OrganizerID, EventID: b.event.ID, RecipientID: uuid.New(),
			SeatIDs: seats, Channel: purchase.ChannelComp, CorrelationID: "comp",
		})
		require.NoError(t, err)
		return o
	}
	ticket := func(t *testing.T, b *testBundle, o purchase.IssuedOrder) {
		t.Helper()
		dbtest.Exec(t, b.pool, `INSERT INTO tickets (id, order_id, seat_id, event_id)
			SELECT gen_random_uuid(), h.order_id, hs.seat_id, s.event_id
			FROM hold_seats hs JOIN holds h ON h.id = hs.hold_id JOIN seats s ON s.id = hs.seat_id WHERE h.order_id = $1`, o.OrderID)
		dbtest.Exec(t, b.pool, "UPDATE hold_seats SET released_at = now() WHERE hold_id = $1", o.HoldID)
		dbtest.Exec(t, b.pool, "UPDATE orders SET status = 'ticketed' WHERE id = $1", o.OrderID)
	}
	hold := func(svc *purchase.Service, b *testBundle, seat uuid.UUID) (purchase.Hold, error) {
		return svc.Hold(context.Background(), purchase.HoldParams{UserID: uuid.New(), EventID: b.event.ID, SeatIDs: []uuid.UUID{seat}})
	}

	t.Run("TicketedAndResold", func(t *testing.T) {
		t.Parallel()
		svc, b := setup(t)
		o := issue(t, svc, b, b.seats[0], b.seats[1])
		ticket(t, b, o)
		for range 2 {
			st, err := svc.Refund(t.Context(), b.event.OrganizerID, o.OrderID, purchase.RefundOptions{Resell: true})
			require.NoError(t, err)
			require.Equal(t, purchase.OrderCanceled, st.Status)
		}
		var reasons []string
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT coalesce(array_agg(envelope::jsonb #>> '{payload,reason}'), '{}')
			FROM outbox WHERE aggregate_id = $1 AND event_type = $2`, o.OrderID, outbox.TypeOrderCanceled).Scan(&reasons))
		require.Equal(t, []string{purchase.ReasonVoidedByOrganizer}, reasons, "one void")
		require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE aggregate_id = $1 AND event_type = $2",
			o.OrderID, outbox.TypeRefundRequested), "nothing to the provider")
		require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM tickets WHERE order_id = $1 AND revoked_at IS NULL", o.OrderID))
		_, err := hold(svc, b, b.seats[0])
		require.NoError(t, err, "a resold seat is on sale")
	})

	t.Run("TicketedKeptOffSale", func(t *testing.T) {
		t.Parallel()
		svc, b := setup(t)
		o := issue(t, svc, b, b.seats[0])
		ticket(t, b, o)
		st, err := svc.Refund(t.Context(), b.event.OrganizerID, o.OrderID, purchase.RefundOptions{})
		require.NoError(t, err)
		require.Equal(t, purchase.OrderCanceled, st.Status)
		_, err = hold(svc, b, b.seats[0])
		var taken *purchase.SeatUnavailableError
		require.ErrorAs(t, err, &taken, "a voided ticket's seat stays off sale without resell")
	})

	t.Run("PaidBeforeItsTickets", func(t *testing.T) {
		t.Parallel()
		svc, b := setup(t)
		o := issue(t, svc, b, b.seats[0])
		st, err := svc.Refund(t.Context(), b.event.OrganizerID, o.OrderID, purchase.RefundOptions{})
		require.NoError(t, err)
		require.Equal(t, purchase.OrderCanceled, st.Status)
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM holds WHERE id = $1 AND status = 'released'", o.HoldID))
		_, err = hold(svc, b, b.seats[0])
		require.NoError(t, err, "the released hold's seat is on sale")
	})

	// A void with resell racing buyers for its seat, released together:
	// at most one buyer holds it, and only once its ticket is revoked, so
	// the seat never has a live ticket and a hold at once.
	t.Run("RacesBuyersForItsSeat", func(t *testing.T) {
		t.Parallel()
		svc, b := setup(t)
		o := issue(t, svc, b, b.seats[0])
		ticket(t, b, o)
		const buyers = 8
		start := make(chan struct{})
		var g errgroup.Group
		var held atomic.Int32
		g.Go(func() error {
			<-start
			_, err := svc.Refund(context.Background(), b.event.OrganizerID, o.OrderID, purchase.RefundOptions{Resell: true})
			return err
		})
		for range buyers {
			g.Go(func() error {
				<-start
				_, err := hold(svc, b, b.seats[0])
				var taken *purchase.SeatUnavailableError
				if errors.As(err, &taken) {
					return nil
				}
				if err == nil {
					held.Add(1)
				}
				return err
			})
		}
		close(start)
		require.NoError(t, g.Wait())
		require.LessOrEqual(t, held.Load(), int32(1))
		t.Logf("buyers who held the voided seat: %d", held.Load())
		require.Zero(t, dbtest.Count(t, b.pool, `SELECT count(*) FROM hold_seats hs JOIN tickets t ON t.seat_id = hs.seat_id
			WHERE hs.released_at IS NULL AND t.order_id = $1 AND t.revoked_at IS NULL`, o.OrderID), "a seat ticketed and held")
	})
}
