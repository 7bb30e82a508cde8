package catalog_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"boxoffice/catalog"
	"boxoffice/dbtest"
	"boxoffice/purchase"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestSeatMapCache(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	plain := catalog.New(pool)
	ev, err := plain.CreateEvent(ctx, catalog.EventParams{
		OrganizerID: uuid.New(), Name: "cache", StartsAt: time.Now().Add(time.Hour), Currency: "eur", Cell: "default",
		Sections: []catalog.Section{{Name: "A", Rows: 10, SeatsPerRow: 20, PriceMinor: 1000}},
	})
	require.NoError(t, err)
	const ttl = 300 * time.Millisecond
	cached := plain.WithSeatMapCache(ttl)

	t.Run("ConcurrentReadersShareOneLoad", func(t *testing.T) {
		before := catalog.SeatReads(cached)
		var g errgroup.Group
		for range 64 {
			g.Go(func() error {
				seats, err := cached.Seats(ctx, ev.ID)
				if err == nil && len(seats) != 200 {
					t.Errorf("got %d seats", len(seats))
				}
				return err
			})
		}
		require.NoError(t, g.Wait())
		// All 64 fall within one ttl: at most a load or two, never one each.
		require.LessOrEqual(t, catalog.SeatReads(cached)-before, int64(2))
	})

	t.Run("StaleForAtMostTTL", func(t *testing.T) {
		seats, err := cached.Seats(ctx, ev.ID)
		require.NoError(t, err)
		seat := seats[0].ID
		_, err = purchase.NewService(pool, slog.New(slog.DiscardHandler), purchase.Config{}).Hold(ctx, purchase.HoldParams{
			UserID: uuid.New(), EventID: ev.ID, SeatIDs: []uuid.UUID{seat}, IdempotencyKey: uuid.NewString(), CorrelationID: "test",
		})
		require.NoError(t, err)
		status := func(c *catalog.Catalog) string {
			seats, err := c.Seats(ctx, ev.ID)
			require.NoError(t, err)
			for _, s := range seats {
				if s.ID == seat {
					return s.Status
				}
			}
			return "missing"
		}
		require.Equal(t, "held", status(plain), "without the cache the map is read afresh")
		require.Eventually(t, func() bool { return status(cached) == "held" }, 5*ttl, 20*time.Millisecond)
	})

	t.Run("UnknownEventIsNotFound", func(t *testing.T) {
		_, err := cached.Seats(ctx, uuid.New())
		require.ErrorIs(t, err, catalog.ErrNotFound)
	})
}
