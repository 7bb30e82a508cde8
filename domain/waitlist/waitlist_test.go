package waitlist_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"boxoffice/domain/purchase"
	"boxoffice/domain/waitlist"
	"boxoffice/platform/db"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type testBundle struct {
	pool     *pgxpool.Pool
	purchase *purchase.Service
	event    fixture.Event
	category uuid.UUID
	holds    []purchase.Hold // one per seat, in seat order, selling the event out
}

// rules are checkout rules with no limit and the service's hold lifetime.
type rules struct{}

func (rules) CheckoutRules(context.Context, uuid.UUID) (purchase.CheckoutRules, error) {
	return purchase.CheckoutRules{}, nil
}

// setup is an event of seats seats in one category, and the waitlist.
func setup(t *testing.T, pool *pgxpool.Pool, seats int) (*waitlist.Service, *testBundle) {
	t.Helper()
	if pool == nil {
		pool = dbtest.New(t)
	}
	ev := fixture.NewEvent(t, pool, fixture.EventSpec{Rows: 1, SeatsPerRow: seats})
	b := &testBundle{pool: pool, event: ev, purchase: purchase.NewService(pool, slog.New(slog.DiscardHandler), purchase.Config{})}
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT category_id FROM seats WHERE id = $1", ev.Seats[0]).Scan(&b.category))
	return waitlist.New(pool, b.purchase, waitlist.Config{}), b
}

// sellOut holds every seat, one hold per seat.
func (b *testBundle) sellOut(t *testing.T) {
	t.Helper()
	for _, s := range b.event.Seats {
		b.holds = append(b.holds, fixture.Hold(t, b.pool, b.event.ID, "sell-out", s))
	}
}

// expireHold makes the i-th hold past its expiry (a seat that came back).
func (b *testBundle) expireHold(t *testing.T, i int) {
	t.Helper()
	dbtest.Exec(t, b.pool, "UPDATE holds SET expires_at = now() - interval '1 second' WHERE id = $1", b.holds[i].HoldID)
}

func (b *testBundle) join(t *testing.T, w *waitlist.Service, quantity int) waitlist.Entry {
	t.Helper()
	e, err := w.Join(t.Context(), waitlist.JoinParams{UserID: uuid.New(), EventID: b.event.ID, CategoryID: b.category, Quantity: quantity})
	require.NoError(t, err)
	return e
}

func round(t *testing.T, w *waitlist.Service, b *testBundle) int {
	t.Helper()
	n, err := db.WithTxV(t.Context(), b.pool, func(ctx context.Context, tx pgx.Tx) (int, error) {
		return w.OfferRound(ctx, tx, b.event.ID, "test")
	})
	require.NoError(t, err)
	return n
}

// requireOwnedOnce checks the seat ownership invariants the audit checks:
// no seat is both reserved (blocked) and held, no seat has two live hold
// rows, and every live offer reserves exactly its quantity.
func requireOwnedOnce(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM seat_blocks bl
		JOIN hold_seats hs ON hs.seat_id = bl.seat_id AND hs.released_at IS NULL`), "a reserved seat is also held")
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM (SELECT seat_id FROM hold_seats
		WHERE released_at IS NULL GROUP BY seat_id HAVING count(*) > 1) x`), "two holds on one seat")
	require.Zero(t, dbtest.Count(t, pool, `SELECT count(*) FROM waitlist_entries w
		WHERE (w.state = 'offered') <> ((SELECT count(*) FROM seat_blocks b WHERE b.waitlist_entry_id = w.id) = w.quantity)`),
		"an offer without its seats, or seats reserved for an entry that is not offered")
}

func TestJoin(t *testing.T) {
	t.Parallel()
	w, b := setup(t, nil, 2)
	ctx := t.Context()
	user := uuid.New()
	join := func(user uuid.UUID) (waitlist.Entry, error) {
		return w.Join(ctx, waitlist.JoinParams{UserID: user, EventID: b.event.ID, CategoryID: b.category, Quantity: 1})
	}

	_, err := join(user)
	require.ErrorIs(t, err, waitlist.ErrSeatsAvailable, "seats on sale: hold them")

	b.sellOut(t)
	first, err := join(user)
	require.NoError(t, err)
	require.Equal(t, waitlist.StateWaiting, first.State)
	require.Zero(t, first.Ahead)
	_, err = join(user)
	require.ErrorIs(t, err, waitlist.ErrAlreadyWaiting)
	second, err := join(uuid.New())
	require.NoError(t, err)
	require.Equal(t, 1, second.Ahead)

	_, err = w.Join(ctx, waitlist.JoinParams{UserID: uuid.New(), EventID: b.event.ID, CategoryID: uuid.New(), Quantity: 1})
	require.ErrorIs(t, err, waitlist.ErrCategoryNotInEvent)
	_, err = w.Get(ctx, uuid.New(), first.ID)
	require.ErrorIs(t, err, waitlist.ErrEntryNotFound, "another buyer's entry")

	left, err := w.Leave(ctx, user, first.ID)
	require.NoError(t, err)
	require.Equal(t, waitlist.StateLeft, left.State)
	again, err := w.Get(ctx, second.UserID, second.ID)
	require.NoError(t, err)
	require.Zero(t, again.Ahead, "the entry before it left")
	_, err = join(user)
	require.NoError(t, err, "a buyer who left may join again, at the back")
}

// Seats that come back are offered in waitlist order, first fit: an
// entry whose quantity is not free keeps its place while a later one that
// fits is offered. The offered seats are reserved: no other buyer can
// hold them, the organizer can neither block, issue nor release them. A
// second round offers nothing (an event delivered twice offers once).
func TestOfferRound(t *testing.T) {
	t.Parallel()
	w, b := setup(t, nil, 3)
	ctx := t.Context()
	b.sellOut(t)
	big := b.join(t, w, 2)
	small := b.join(t, w, 1)
	last := b.join(t, w, 1)

	b.expireHold(t, 1)
	require.Equal(t, 1, round(t, w, b))
	require.Zero(t, round(t, w, b), "nothing more is free: a second round offers nothing")
	e, err := w.Get(ctx, small.UserID, small.ID)
	require.NoError(t, err)
	require.Equal(t, waitlist.StateOffered, e.State, "the first entry that fits")
	require.Equal(t, []uuid.UUID{b.event.Seats[1]}, e.OfferedSeats)
	require.NotNil(t, e.OfferExpiresAt)
	require.WithinDuration(t, time.Now().Add(waitlist.DefaultOfferTTL), *e.OfferExpiresAt, time.Minute)
	e, err = w.Get(ctx, big.UserID, big.ID)
	require.NoError(t, err)
	require.Equal(t, waitlist.StateWaiting, e.State)
	require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE event_type = 'WaitlistOffered' AND aggregate_id = $1", small.ID))

	// Reserved: nobody else holds it, the organizer cannot take it.
	_, err = b.purchase.Hold(ctx, purchase.HoldParams{UserID: uuid.New(), EventID: b.event.ID, SeatIDs: []uuid.UUID{b.event.Seats[1]}, IdempotencyKey: "x"})
	var unavailable *purchase.SeatUnavailableError
	require.ErrorAs(t, err, &unavailable)
	err = b.purchase.BlockSeats(ctx, purchase.BlockSeatsParams{
		OrganizerID: b.event.OrganizerID, UserID: uuid.New(), EventID: b.event.ID, SeatIDs: []uuid.UUID{b.event.Seats[1]}, Reason: purchase.BlockPress,
	})
	require.ErrorAs(t, err, &unavailable)
	released, err := b.purchase.ReleaseSeats(ctx, b.event.OrganizerID, b.event.ID, []uuid.UUID{b.event.Seats[1]})
	require.NoError(t, err)
	require.Empty(t, released, "an offer's reservation is not the organizer's to release")
	blocks, err := b.purchase.SeatBlocks(ctx, b.event.OrganizerID, b.event.ID)
	require.NoError(t, err)
	require.Empty(t, blocks, "the organizer's list shows their blocks only")

	// Two more seats come back: the big entry, first in line, gets them.
	b.expireHold(t, 0)
	b.expireHold(t, 2)
	require.Equal(t, 1, round(t, w, b))
	e, err = w.Get(ctx, big.UserID, big.ID)
	require.NoError(t, err)
	require.Equal(t, waitlist.StateOffered, e.State)
	require.ElementsMatch(t, []uuid.UUID{b.event.Seats[0], b.event.Seats[2]}, e.OfferedSeats)
	e, err = w.Get(ctx, last.UserID, last.ID)
	require.NoError(t, err)
	require.Equal(t, waitlist.StateWaiting, e.State)
	requireOwnedOnce(t, b.pool)

	// The small entry accepts: its seat is held by its order.
	accepted, err := w.Accept(ctx, waitlist.AcceptParams{UserID: small.UserID, EntryID: small.ID, CorrelationID: "accept", Rules: rules{}})
	require.NoError(t, err)
	require.Equal(t, waitlist.StateAccepted, accepted.State)
	require.NotNil(t, accepted.OrderID)
	require.Empty(t, accepted.OfferedSeats)
	require.EqualValues(t, 1, dbtest.Count(t, b.pool, `SELECT count(*) FROM hold_seats hs JOIN holds h ON h.id = hs.hold_id
		WHERE h.order_id = $1 AND hs.seat_id = $2 AND hs.released_at IS NULL AND h.status = 'active'`, *accepted.OrderID, b.event.Seats[1]))
	again, err := w.Accept(ctx, waitlist.AcceptParams{UserID: small.UserID, EntryID: small.ID, Rules: rules{}})
	require.NoError(t, err, "accepting again returns the accepted entry")
	require.Equal(t, *accepted.OrderID, *again.OrderID)
	_, err = w.Accept(ctx, waitlist.AcceptParams{UserID: last.UserID, EntryID: last.ID, Rules: rules{}})
	require.ErrorIs(t, err, waitlist.ErrOfferNotLive, "a waiting entry has no offer")

	// The big entry leaves: its seats pass to the last entry.
	_, err = w.Leave(ctx, big.UserID, big.ID)
	require.NoError(t, err)
	e, err = w.Get(ctx, last.UserID, last.ID)
	require.NoError(t, err)
	require.Equal(t, waitlist.StateOffered, e.State)
	requireOwnedOnce(t, b.pool)
}

// An offer's acceptance and its expiry, racing: goroutines released
// together, the sweeper ending offers as soon as they are past their
// time while the buyer accepts. Exactly one happens: the buyer holds the
// seat, or the offer expired and the seat passed to the next entry; the
// seat is never owned twice and never lost. The offers expire at
// growing distances from the release, so both outcomes are seen.
func TestAcceptRacesExpiry(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.WithoutCancel(t.Context())
	outcomes := map[string]int{}
	const rounds = 24
	for r := range rounds {
		w, b := setup(t, pool, 1)
		b.sellOut(t)
		first := b.join(t, w, 1)
		next := b.join(t, w, 1)
		b.expireHold(t, 0)
		require.Equal(t, 1, round(t, w, b))
		seat := b.event.Seats[0]
		delay := time.Duration(r%6) * 2 * time.Millisecond
		dbtest.Exec(t, pool, "UPDATE waitlist_entries SET offer_expires_at = clock_timestamp() + $2::interval WHERE id = $1",
			first.ID, delay.String())

		start := make(chan struct{})
		var g errgroup.Group
		var acceptErr error
		g.Go(func() error {
			<-start
			_, acceptErr = w.Accept(ctx, waitlist.AcceptParams{UserID: first.UserID, EntryID: first.ID, CorrelationID: "race", Rules: rules{}})
			return nil
		})
		g.Go(func() error {
			<-start
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				if _, err := w.ExpireOffers(ctx, 10); err != nil {
					return err
				}
				e, err := w.Get(ctx, first.UserID, first.ID)
				if err != nil {
					return err
				}
				if e.State != waitlist.StateOffered {
					return nil
				}
			}
			return nil
		})
		close(start)
		require.NoError(t, g.Wait())

		e, err := w.Get(ctx, first.UserID, first.ID)
		require.NoError(t, err)
		n, err := w.Get(ctx, next.UserID, next.ID)
		require.NoError(t, err)
		switch {
		case acceptErr == nil:
			outcomes["accepted"]++
			require.Equal(t, waitlist.StateAccepted, e.State)
			require.Equal(t, waitlist.StateWaiting, n.State, "round %d: the seat is the first buyer's", r)
			require.EqualValues(t, 1, dbtest.Count(t, pool, `SELECT count(*) FROM hold_seats hs JOIN holds h ON h.id = hs.hold_id
				WHERE h.order_id = $1 AND hs.seat_id = $2 AND hs.released_at IS NULL`, *e.OrderID, seat))
		default:
			outcomes["expired"]++
			require.ErrorIs(t, acceptErr, waitlist.ErrOfferNotLive, "round %d", r)
			require.Equal(t, waitlist.StateExpired, e.State)
			require.Equal(t, waitlist.StateOffered, n.State, "round %d: the expired offer passed to the next buyer", r)
			require.Equal(t, []uuid.UUID{seat}, n.OfferedSeats)
			require.Zero(t, dbtest.Count(t, pool, "SELECT count(*) FROM hold_seats WHERE seat_id = $1 AND released_at IS NULL", seat))
		}
		requireOwnedOnce(t, pool)
	}
	t.Logf("outcomes over %d rounds: %v", rounds, outcomes)
	require.Positive(t, outcomes["accepted"], "no round was won by the acceptance")
	require.Positive(t, outcomes["expired"], "no round was won by the expiry")
}

// The sweeper, running, ends an offer once past its time and passes its
// seat to the next entry; it stops when its context is done.
func TestSweeperPassesExpiredOffers(t *testing.T) {
	t.Parallel()
	w, b := setup(t, nil, 1)
	b.sellOut(t)
	first := b.join(t, w, 1)
	next := b.join(t, w, 1)
	b.expireHold(t, 0)
	require.Equal(t, 1, round(t, w, b))
	dbtest.Exec(t, b.pool, "UPDATE waitlist_entries SET offer_expires_at = now() WHERE id = $1", first.ID)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- waitlist.NewSweeper(w, waitlist.SweeperConfig{Interval: 10 * time.Millisecond}).Run(ctx)
	}()
	require.Eventually(t, func() bool {
		e, err := w.Get(t.Context(), next.UserID, next.ID)
		return err == nil && e.State == waitlist.StateOffered
	}, 10*time.Second, 10*time.Millisecond, "the next entry is offered the seat")
	e, err := w.Get(t.Context(), first.UserID, first.ID)
	require.NoError(t, err)
	require.Equal(t, waitlist.StateExpired, e.State)
	requireOwnedOnce(t, b.pool)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the sweeper did not stop")
	}
}

// A join racing a seat that comes back never leaves its entry waiting
// beside the free seat, although the waitlist consumer looks for waiting
// entries without the event's lock (Waiting) and skips an event nobody
// waits for: the seat's return is offered by the consumer's round when it
// saw the entry, else by the round Join runs once its entry is in. Each
// round releases a join and a seat's return (the consumer's plan and, if
// it saw someone waiting, its round) together, with a varying head start.
func TestJoinRacesReturnedSeat(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.WithoutCancel(t.Context())
	outcomes := map[string]int{}
	const rounds = 40
	for r := range rounds {
		w, b := setup(t, pool, 1)
		b.sellOut(t)
		start := make(chan struct{})
		var g errgroup.Group
		var entry waitlist.Entry
		var consumerSaw bool
		g.Go(func() error {
			<-start
			var err error
			entry, err = w.Join(ctx, waitlist.JoinParams{UserID: uuid.New(), EventID: b.event.ID, CategoryID: b.category, Quantity: 1})
			if errors.Is(err, waitlist.ErrSeatsAvailable) {
				return nil
			}
			return err
		})
		g.Go(func() error {
			<-start
			time.Sleep(time.Duration(r%8) * 250 * time.Microsecond)
			if _, err := pool.Exec(ctx, "UPDATE holds SET expires_at = now() - interval '1 second' WHERE id = $1", b.holds[0].HoldID); err != nil {
				return err
			}
			waiting, err := w.Waiting(ctx, []uuid.UUID{b.holds[0].OrderID})
			if err != nil || !waiting[b.holds[0].OrderID] {
				return err
			}
			consumerSaw = true
			return db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
				_, err := w.OfferRound(ctx, tx, b.event.ID, "race")
				return err
			})
		})
		close(start)
		require.NoError(t, g.Wait())
		if entry.ID == uuid.Nil {
			outcomes["seat back before the join"]++
			continue
		}
		e, err := w.Get(ctx, entry.UserID, entry.ID)
		require.NoError(t, err)
		require.Equal(t, waitlist.StateOffered, e.State, "round %d: the entry waits beside the seat that came back", r)
		if consumerSaw {
			outcomes["offered by the consumer"]++
		} else {
			outcomes["offered by the join"]++
		}
		requireOwnedOnce(t, pool)
	}
	t.Logf("outcomes over %d rounds: %v", rounds, outcomes)
}
