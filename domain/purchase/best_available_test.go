package purchase_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"boxoffice/domain/catalog"
	"boxoffice/domain/purchase"
	"boxoffice/testkit/dbtest"
)

// bestEvent is an event whose one category, Stalls, has rows × perRow
// seats labelled "A-1" onwards, plus a Balcony category of 4 seats.
type bestEvent struct {
	pool     *pgxpool.Pool
	svc      *purchase.Service
	cat      *catalog.Catalog
	ev       catalog.Event
	org      uuid.UUID
	stalls   uuid.UUID
	balcony  uuid.UUID
	labelOf  map[uuid.UUID]string
	idOf     map[string]uuid.UUID
	perRow   int
	seatRows int
}

func newBestEvent(t testing.TB, rows, perRow int) *bestEvent {
	t.Helper()
	pool := dbtest.New(t)
	cat := catalog.New(pool)
	org := uuid.New()
	ev, err := cat.CreateEvent(t.Context(), catalog.EventParams{
		OrganizerID: org, Name: "best available", StartsAt: time.Now().Add(time.Hour), Currency: "eur", Cell: "default",
		Categories: []catalog.Category{{Name: "Stalls", PriceMinor: 5000}, {Name: "Balcony", PriceMinor: 3000}},
		Sections: []catalog.Section{
			{Name: "Stalls", Rows: rows, SeatsPerRow: perRow, PriceMinor: 5000, Category: "Stalls"},
			{Name: "Circle", Rows: 1, SeatsPerRow: 4, PriceMinor: 3000, Category: "Balcony"},
		},
	})
	require.NoError(t, err)
	m, err := cat.SeatMap(t.Context(), ev.ID)
	require.NoError(t, err)
	b := &bestEvent{
		pool: pool, cat: cat, ev: ev, org: org, perRow: perRow, seatRows: rows,
		svc:     purchase.NewService(pool, slog.New(slog.NewTextHandler(io.Discard, nil)), purchase.Config{}),
		labelOf: map[uuid.UUID]string{}, idOf: map[string]uuid.UUID{},
		stalls: m.Categories[0].ID, balcony: m.Categories[1].ID,
	}
	for _, s := range m.Seats {
		b.labelOf[s.ID] = s.Section + "/" + s.Label
		b.idOf[s.Section+"/"+s.Label] = s.ID
	}
	return b
}

func (b *bestEvent) hold(ctx context.Context, user uuid.UUID, key string, ba purchase.BestAvailable) (purchase.Hold, error) {
	if ba.CategoryID == uuid.Nil {
		ba.CategoryID = b.stalls
	}
	return b.svc.Hold(ctx, purchase.HoldParams{
		UserID: user, EventID: b.ev.ID, IdempotencyKey: key, CorrelationID: "c", BestAvailable: &ba,
	})
}

func labels(t *testing.T, b *bestEvent, h purchase.Hold) []string {
	t.Helper()
	var out []string
	for _, s := range h.Seats {
		require.Equal(t, b.labelOf[s.ID], s.Section+"/"+s.Label)
		out = append(out, s.Section+"/"+s.Label)
	}
	return out
}

// rowAndNumber splits "Stalls/B-3" into "Stalls/B" and 3.
func rowAndNumber(label string) (string, int) {
	i := strings.LastIndex(label, "-")
	n, _ := strconv.Atoi(label[i+1:])
	return label[:i], n
}

// adjacent says whether the seats are one run: one row, consecutive numbers.
func adjacent(seats []string) bool {
	row, _ := rowAndNumber(seats[0])
	var nums []int
	for _, s := range seats {
		r, n := rowAndNumber(s)
		if r != row {
			return false
		}
		nums = append(nums, n)
	}
	slices.Sort(nums)
	return nums[len(nums)-1]-nums[0] == len(nums)-1
}

func TestBestAvailable(t *testing.T) {
	t.Parallel()

	t.Run("PicksTheBestFreeRunInSeatMapOrder", func(t *testing.T) {
		t.Parallel()
		b := newBestEvent(t, 3, 5)
		h, err := b.hold(t.Context(), uuid.New(), "a", purchase.BestAvailable{Quantity: 3})
		require.NoError(t, err)
		require.Equal(t, []string{"Stalls/A-1", "Stalls/A-2", "Stalls/A-3"}, labels(t, b, h))
		// Two are left in row A: four go to row B, together.
		h, err = b.hold(t.Context(), uuid.New(), "b", purchase.BestAvailable{Quantity: 4})
		require.NoError(t, err)
		require.Equal(t, []string{"Stalls/B-1", "Stalls/B-2", "Stalls/B-3", "Stalls/B-4"}, labels(t, b, h))
	})

	t.Run("OrganizerScoresDecideAndSeatsBeatTheirRow", func(t *testing.T) {
		t.Parallel()
		b := newBestEvent(t, 3, 5)
		require.NoError(t, b.cat.SetSeatScores(t.Context(), b.org, b.ev.ID, []catalog.SeatScore{
			{Section: "Stalls", Row: "C", Score: 10},
			{SeatID: b.idOf["Stalls/C-1"], Score: -5},
		}))
		h, err := b.hold(t.Context(), uuid.New(), "a", purchase.BestAvailable{Quantity: 2})
		require.NoError(t, err)
		require.Equal(t, []string{"Stalls/C-2", "Stalls/C-3"}, labels(t, b, h))

		// Another organizer's event does not exist; an item naming no seat is refused.
		require.ErrorIs(t, b.cat.SetSeatScores(t.Context(), uuid.New(), b.ev.ID,
			[]catalog.SeatScore{{Section: "Stalls", Row: "A", Score: 1}}), catalog.ErrNotFound)
		var invalid *catalog.ValidationError
		require.ErrorAs(t, b.cat.SetSeatScores(t.Context(), b.org, b.ev.ID,
			[]catalog.SeatScore{{Section: "Stalls", Row: "Z", Score: 1}}), &invalid)
	})

	t.Run("ScatteredOnlyWhenNoRunIsFreeAndNeverWhenAdjacentOnly", func(t *testing.T) {
		t.Parallel()
		b := newBestEvent(t, 2, 3)
		// Leave A-2 and B-2 only... by holding the others by name.
		_, err := b.svc.Hold(t.Context(), purchase.HoldParams{
			UserID: uuid.New(), EventID: b.ev.ID, IdempotencyKey: "named", CorrelationID: "c",
			SeatIDs: []uuid.UUID{b.idOf["Stalls/A-1"], b.idOf["Stalls/A-3"], b.idOf["Stalls/B-1"], b.idOf["Stalls/B-3"]},
		})
		require.NoError(t, err)
		_, err = b.hold(t.Context(), uuid.New(), "adj", purchase.BestAvailable{Quantity: 2, AdjacentOnly: true})
		require.ErrorIs(t, err, purchase.ErrNotEnoughSeats)
		h, err := b.hold(t.Context(), uuid.New(), "any", purchase.BestAvailable{Quantity: 2})
		require.NoError(t, err)
		require.Equal(t, []string{"Stalls/A-2", "Stalls/B-2"}, labels(t, b, h))
		_, err = b.hold(t.Context(), uuid.New(), "none", purchase.BestAvailable{Quantity: 1})
		require.ErrorIs(t, err, purchase.ErrNotEnoughSeats)
	})

	t.Run("BlockedSeatsAreNeverPicked", func(t *testing.T) {
		t.Parallel()
		b := newBestEvent(t, 1, 4)
		require.NoError(t, b.svc.BlockSeats(t.Context(), purchase.BlockSeatsParams{
			OrganizerID: b.org, UserID: uuid.New(), EventID: b.ev.ID, Reason: purchase.BlockReason("press"),
			SeatIDs: []uuid.UUID{b.idOf["Stalls/A-2"]},
		}))
		h, err := b.hold(t.Context(), uuid.New(), "a", purchase.BestAvailable{Quantity: 2})
		require.NoError(t, err)
		require.Equal(t, []string{"Stalls/A-3", "Stalls/A-4"}, labels(t, b, h))
		_, err = b.hold(t.Context(), uuid.New(), "b", purchase.BestAvailable{Quantity: 2})
		require.ErrorIs(t, err, purchase.ErrNotEnoughSeats, "A-1 is all that is left")
	})

	t.Run("RetryWithTheKeyAnswersTheSameSeats", func(t *testing.T) {
		t.Parallel()
		b := newBestEvent(t, 2, 4)
		user := uuid.New()
		ask := purchase.BestAvailable{Quantity: 3}
		first, err := b.hold(t.Context(), user, "k", ask)
		require.NoError(t, err)
		// Another buyer takes seats in between: the retry still answers the first pick.
		_, err = b.hold(t.Context(), uuid.New(), "other", purchase.BestAvailable{Quantity: 4})
		require.NoError(t, err)
		again, err := b.hold(t.Context(), user, "k", ask)
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, first.OrderID, again.OrderID)
		require.Equal(t, first.Seats, again.Seats)
		// The replay a retry gets without an admission reads the same seats.
		replayed, err := b.svc.Replay(t.Context(), purchase.HoldParams{
			UserID: user, EventID: b.ev.ID, IdempotencyKey: "k", BestAvailable: &purchase.BestAvailable{CategoryID: b.stalls, Quantity: 3},
		})
		require.NoError(t, err)
		require.Equal(t, first.Seats, replayed.Seats)
		// The same key asking for something else is a conflict.
		_, err = b.hold(t.Context(), user, "k", purchase.BestAvailable{Quantity: 2})
		require.ErrorIs(t, err, purchase.ErrIdempotencyConflict)
	})

	t.Run("UnknownCategoryIsRefused", func(t *testing.T) {
		t.Parallel()
		b := newBestEvent(t, 1, 2)
		_, err := b.hold(t.Context(), uuid.New(), "a", purchase.BestAvailable{CategoryID: uuid.New(), Quantity: 1})
		require.ErrorIs(t, err, purchase.ErrCategoryNotInEvent)
	})

	t.Run("CategoryLimitStillApplies", func(t *testing.T) {
		t.Parallel()
		b := newBestEvent(t, 1, 4)
		user := uuid.New()
		_, err := b.svc.Hold(t.Context(), purchase.HoldParams{
			UserID: user, EventID: b.ev.ID, IdempotencyKey: "a", CorrelationID: "c", SeatLimit: 3,
			BestAvailable: &purchase.BestAvailable{CategoryID: b.stalls, Quantity: 2},
		})
		require.NoError(t, err)
		_, err = b.svc.Hold(t.Context(), purchase.HoldParams{
			UserID: user, EventID: b.ev.ID, IdempotencyKey: "b", CorrelationID: "c", SeatLimit: 3,
			BestAvailable: &purchase.BestAvailable{CategoryID: b.stalls, Quantity: 2},
		})
		require.ErrorIs(t, err, purchase.ErrSeatLimit)
	})

	// The last free seat, locked for a moment by another transaction (a
	// buyer's try that will let it go), is waited for, not refused: the
	// hold blocks on the lock, and takes the seat once it is let go.
	t.Run("ASeatLockedForAMomentIsWaitedForNotRefused", func(t *testing.T) {
		t.Parallel()
		b := newBestEvent(t, 1, 1)
		seat := b.idOf["Stalls/A-1"]
		require.NotEqual(t, uuid.Nil, seat)
		blocker, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		defer func() { _ = blocker.Rollback(context.WithoutCancel(t.Context())) }()
		_, err = blocker.Exec(t.Context(), "SELECT 1 FROM seats WHERE id = $1 FOR UPDATE", seat)
		require.NoError(t, err)

		type result struct {
			hold purchase.Hold
			err  error
		}
		done := make(chan result, 1)
		go func() {
			h, err := b.hold(context.WithoutCancel(t.Context()), uuid.New(), "k", purchase.BestAvailable{Quantity: 1})
			done <- result{h, err}
		}()
		// The signal: the hold's backend waits on a lock (before the fix it
		// answered not-enough-seats at once, and that answer arrives first).
		require.Eventually(t, func() bool {
			select {
			case r := <-done:
				done <- r
				return true
			default:
			}
			return dbtest.Count(t, b.pool, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND query LIKE '%hold_best_available%'`) > 0
		}, 10*time.Second, 5*time.Millisecond)
		select {
		case r := <-done:
			require.NoError(t, r.err, "refused while the seat was only locked for a moment")
		default:
		}
		require.NoError(t, blocker.Rollback(t.Context()))
		r := <-done
		require.NoError(t, r.err)
		require.Equal(t, []string{"Stalls/A-1"}, labels(t, b, r.hold))
	})

	// 64 buyers released together ask for 1 to 4 seats each (160 in all)
	// of a category of 100 (10 rows of 10): no seat is ever held twice,
	// every hold has all its seats or none, the buyers that got nothing are
	// those the category ran out for, and a hold's seats are scattered only
	// when no run of as many free seats is left (never held by anyone).
	t.Run("SixtyFourBuyersRacingNeverDoubleHold", func(t *testing.T) {
		t.Parallel()
		b := newBestEvent(t, 10, 10)
		const buyers = 64
		type result struct {
			qty  int
			hold purchase.Hold
			err  error
		}
		results := make([]result, buyers)
		start := make(chan struct{})
		var g errgroup.Group
		for i := range buyers {
			results[i].qty = i%4 + 1
			g.Go(func() error {
				<-start
				h, err := b.hold(context.WithoutCancel(t.Context()), uuid.New(), "k", purchase.BestAvailable{Quantity: results[i].qty})
				results[i].hold, results[i].err = h, err
				return nil
			})
		}
		started := time.Now()
		close(start)
		require.NoError(t, g.Wait())
		t.Logf("64 best-available holds in %s", time.Since(started))

		var doubled, active int
		require.NoError(t, b.pool.QueryRow(t.Context(), `
			SELECT count(*) - count(DISTINCT hs.seat_id), count(*)
			FROM hold_seats hs JOIN seats s ON s.id = hs.seat_id
			WHERE s.event_id = $1 AND hs.released_at IS NULL`, b.ev.ID).Scan(&doubled, &active))
		require.Zero(t, doubled, "no seat held twice")

		held := map[string]bool{}
		sum, failed, scattered := 0, 0, []result{}
		for _, r := range results {
			if r.err != nil {
				require.ErrorIs(t, r.err, purchase.ErrNotEnoughSeats)
				failed++
				continue
			}
			seats := labels(t, b, r.hold)
			require.Len(t, seats, r.qty, "all or nothing")
			var inDB int
			require.NoError(t, b.pool.QueryRow(t.Context(),
				`SELECT count(*) FROM hold_seats WHERE hold_id = $1 AND released_at IS NULL`, r.hold.HoldID).Scan(&inDB))
			require.Equal(t, r.qty, inDB, "the hold owns exactly the seats it answered")
			for _, s := range seats {
				require.False(t, held[s], "%s answered to two holds", s)
				held[s] = true
				require.True(t, strings.HasPrefix(s, "Stalls/"), "only the category asked for")
			}
			sum += r.qty
			if !adjacent(seats) {
				scattered = append(scattered, r)
			}
		}
		require.Equal(t, active, sum)
		require.Positive(t, failed, "demand exceeds the category")
		// A buyer fails only when fewer seats than asked are left.
		for _, r := range results {
			if r.err != nil {
				require.Less(t, 100-sum, r.qty, "%d free seats left, %d asked", 100-sum, r.qty)
			}
		}
		// Scattered only when no run of as many seats is free even now.
		for _, r := range scattered {
			require.False(t, freeRun(b, held, r.qty), "hold of %d scattered (%v) while a run is still free", r.qty, labels(t, b, r.hold))
		}
		t.Logf("%d held (%d seats), %d refused, %d scattered", buyers-failed, sum, failed, len(scattered))
	})
}

// freeRun says whether some row of Stalls still has qty consecutive seats
// that no hold took.
func freeRun(b *bestEvent, held map[string]bool, qty int) bool {
	for r := range b.seatRows {
		run := 0
		for n := 1; n <= b.perRow; n++ {
			if held[fmt.Sprintf("Stalls/%s-%d", catalog.RowName(r), n)] {
				run = 0
				continue
			}
			if run++; run >= qty {
				return true
			}
		}
	}
	return false
}
