package purchase_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"boxoffice/domain/catalog"
	"boxoffice/domain/purchase"
	"boxoffice/testkit/dbtest"
)

// categoryEvent is an event of two categories: Floor (2 rows of 4 at 9000,
// at most 2 per buyer) and Balcony (1 row of 4 at 4000, no limit).
func categoryEvent(t *testing.T) (*purchase.Service, *catalog.Catalog, catalog.Event, catalog.SeatMap, uuid.UUID) {
	t.Helper()
	pool := dbtest.New(t)
	cat := catalog.New(pool)
	org := uuid.New()
	ev, err := cat.CreateEvent(t.Context(), catalog.EventParams{
		OrganizerID: org, Name: "categories", StartsAt: time.Now().Add(time.Hour), Currency: "eur", Cell: "default",
		Categories: []catalog.Category{{Name: "Floor", PriceMinor: 9000, SeatLimit: 2}, {Name: "Balcony", PriceMinor: 4000}},
		Sections: []catalog.Section{
			{Name: "Stalls", Rows: 2, SeatsPerRow: 4, PriceMinor: 9000, Category: "Floor"},
			{Name: "Circle", Rows: 1, SeatsPerRow: 4, PriceMinor: 4000, Category: "Balcony"},
		},
	})
	require.NoError(t, err)
	m, err := cat.SeatMap(t.Context(), ev.ID)
	require.NoError(t, err)
	svc := purchase.NewService(pool, slog.New(slog.NewTextHandler(io.Discard, nil)), purchase.Config{})
	return svc, cat, ev, m, org
}

func seatsOf(m catalog.SeatMap, category string) []uuid.UUID {
	var ids []uuid.UUID
	for _, s := range m.Seats {
		if s.Category == category {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

func TestPriceCategories(t *testing.T) {
	t.Parallel()

	t.Run("SeatMapShowsEachSeatsCategoryAndPrice", func(t *testing.T) {
		t.Parallel()
		_, _, _, m, _ := categoryEvent(t)
		require.Len(t, m.Categories, 2)
		require.Equal(t, "Floor", m.Categories[0].Name)
		require.Equal(t, 2, m.Categories[0].SeatLimit)
		require.Len(t, seatsOf(m, "Floor"), 8)
		require.Len(t, seatsOf(m, "Balcony"), 4)
		for _, s := range m.Seats {
			want := map[string]int64{"Floor": 9000, "Balcony": 4000}[s.Category]
			require.Equal(t, want, s.PriceMinor, s.Label)
		}
	})

	t.Run("HoldIsPricedFromTheSeatsCategories", func(t *testing.T) {
		t.Parallel()
		svc, _, ev, m, org := categoryEvent(t)
		user := uuid.New()
		h, err := svc.Hold(t.Context(), purchase.HoldParams{
			UserID: user, EventID: ev.ID, SeatIDs: []uuid.UUID{seatsOf(m, "Floor")[0], seatsOf(m, "Balcony")[0]},
			IdempotencyKey: "k", CorrelationID: "c",
		})
		require.NoError(t, err)
		o, err := svc.Order(t.Context(), user, h.OrderID)
		require.NoError(t, err)
		require.Equal(t, int64(13000), o.AmountMinor)

		s, err := svc.Sales(t.Context(), org, ev.ID)
		require.NoError(t, err)
		require.Len(t, s.ByCategory, 2)
		require.Equal(t, "Floor", s.ByCategory[0].Name)
		require.Equal(t, purchase.SeatCounts{Total: 8, Available: 7, Held: 1}, s.ByCategory[0].Seats)
		require.Equal(t, purchase.SeatCounts{Total: 4, Available: 3, Held: 1}, s.ByCategory[1].Seats)
	})

	// A category's per-buyer limit is checked in the hold's transaction
	// under the (event, buyer) lock: one buyer's holds racing each other
	// cannot together exceed it, while other categories stay open.
	t.Run("CategoryLimitHoldsUnderConcurrentHoldsOfOneBuyer", func(t *testing.T) {
		t.Parallel()
		svc, _, ev, m, _ := categoryEvent(t)
		user := uuid.New()
		floor := seatsOf(m, "Floor")
		start := make(chan struct{})
		var g errgroup.Group
		results := make([]error, 4)
		for i := range 4 {
			g.Go(func() error {
				<-start
				_, err := svc.Hold(context.WithoutCancel(t.Context()), purchase.HoldParams{
					UserID: user, EventID: ev.ID, SeatIDs: []uuid.UUID{floor[2*i], floor[2*i+1]},
					IdempotencyKey: uuid.NewString(), CorrelationID: "c",
				})
				results[i] = err
				return nil
			})
		}
		close(start)
		require.NoError(t, g.Wait())
		won := 0
		for _, err := range results {
			if err == nil {
				won++
			} else {
				require.ErrorIs(t, err, purchase.ErrSeatLimit)
			}
		}
		require.Equal(t, 1, won, "two Floor seats per buyer: exactly one pair of them")

		_, err := svc.Hold(t.Context(), purchase.HoldParams{
			UserID: user, EventID: ev.ID, SeatIDs: seatsOf(m, "Balcony"), IdempotencyKey: uuid.NewString(), CorrelationID: "c",
		})
		require.NoError(t, err, "Balcony has no limit of its own")
	})
}

func TestCategoriesOnCreate(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	cat := catalog.New(pool)
	base := catalog.EventParams{OrganizerID: uuid.New(), Name: "e", StartsAt: time.Now(), Currency: "eur", Cell: "default"}

	t.Run("WithoutCategoriesEachSectionIsOne", func(t *testing.T) {
		t.Parallel()
		p := base
		p.Seats = []catalog.Seat{
			{Section: "A", Label: "1", PriceMinor: 100}, {Section: "A", Label: "2", PriceMinor: 200},
			{Section: "B", Label: "1", PriceMinor: 300}, {Section: "B", Label: "2", PriceMinor: 300},
		}
		ev, err := cat.CreateEvent(t.Context(), p)
		require.NoError(t, err)
		cats, err := cat.Categories(t.Context(), ev.ID)
		require.NoError(t, err)
		require.Equal(t, []string{"A · 100", "A · 200", "B"}, []string{cats[0].Name, cats[1].Name, cats[2].Name})
		require.Equal(t, int64(300), cats[2].PriceMinor)
	})

	for name, tc := range map[string]struct {
		p        func(catalog.EventParams) catalog.EventParams
		location string
	}{
		"UnknownCategory": {func(p catalog.EventParams) catalog.EventParams {
			p.Categories = []catalog.Category{{Name: "X", PriceMinor: 1}}
			p.Sections = []catalog.Section{{Name: "A", Rows: 1, SeatsPerRow: 1, PriceMinor: 1, Category: "Y"}}
			return p
		}, "body.sections[0].category"},
		"PriceOtherThanTheCategorys": {func(p catalog.EventParams) catalog.EventParams {
			p.Categories = []catalog.Category{{Name: "X", PriceMinor: 1}}
			p.Sections = []catalog.Section{{Name: "A", Rows: 1, SeatsPerRow: 1, PriceMinor: 2, Category: "X"}}
			return p
		}, "body.sections[0].priceMinor"},
		"CategoryWithoutSeats": {func(p catalog.EventParams) catalog.EventParams {
			p.Categories = []catalog.Category{{Name: "X", PriceMinor: 1}, {Name: "Z", PriceMinor: 1}}
			p.Sections = []catalog.Section{{Name: "A", Rows: 1, SeatsPerRow: 1, PriceMinor: 1, Category: "X"}}
			return p
		}, "body.categories[1]"},
		"DuplicateCategory": {func(p catalog.EventParams) catalog.EventParams {
			p.Categories = []catalog.Category{{Name: "X", PriceMinor: 1}, {Name: "X", PriceMinor: 2}}
			p.Sections = []catalog.Section{{Name: "A", Rows: 1, SeatsPerRow: 1, PriceMinor: 1, Category: "X"}}
			return p
		}, "body.categories[1].name"},
		"SeatWithoutCategory": {func(p catalog.EventParams) catalog.EventParams {
			p.Categories = []catalog.Category{{Name: "X", PriceMinor: 1}}
			p.Seats = []catalog.Seat{{Section: "A", Label: "1", PriceMinor: 1}}
			return p
		}, "body.seats[0].category"},
		"CategoryNamedWithoutCategories": {func(p catalog.EventParams) catalog.EventParams {
			p.Seats = []catalog.Seat{{Section: "A", Label: "1", PriceMinor: 1, Category: "X"}}
			return p
		}, "body.seats[0].category"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := cat.CreateEvent(t.Context(), tc.p(base))
			var verr *catalog.ValidationError
			require.ErrorAs(t, err, &verr)
			require.Equal(t, tc.location, verr.Location)
		})
	}
}
