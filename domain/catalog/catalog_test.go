package catalog_test

import (
	"errors"
	"fmt"
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

func TestEventCache(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	plain := catalog.New(pool)
	ev, err := plain.CreateEvent(ctx, catalog.EventParams{
		OrganizerID: uuid.New(), Name: "cache", StartsAt: time.Now().Add(time.Hour), Currency: "eur", Cell: "default",
		Sections: []catalog.Section{{Name: "A", Rows: 1, SeatsPerRow: 5, PriceMinor: 1000}},
	})
	require.NoError(t, err)

	t.Run("UnknownEventIsReadOnceWithinTheNotFoundTTL", func(t *testing.T) {
		t.Parallel()
		cached := plain.WithEventCache(time.Minute, time.Minute)
		unknown := uuid.New()
		for range 5 {
			_, err := cached.Event(ctx, unknown)
			require.ErrorIs(t, err, catalog.ErrNotFound)
			_, err = cached.Seats(ctx, unknown)
			require.ErrorIs(t, err, catalog.ErrNotFound)
		}
		require.EqualValues(t, 1, catalog.EventReads(cached))
	})

	t.Run("NotFoundExpires", func(t *testing.T) {
		t.Parallel()
		const notFoundTTL = 100 * time.Millisecond
		cached := plain.WithEventCache(time.Minute, notFoundTTL)
		unknown := uuid.New()
		_, err := cached.Event(ctx, unknown)
		require.ErrorIs(t, err, catalog.ErrNotFound)
		require.Eventually(t, func() bool {
			_, err := cached.Event(ctx, unknown)
			return errors.Is(err, catalog.ErrNotFound) && catalog.EventReads(cached) == 2
		}, 5*time.Second, 20*time.Millisecond, "read again once the answer is older than its TTL")
	})

	t.Run("KnownEventIsServedFromMemory", func(t *testing.T) {
		t.Parallel()
		cached := plain.WithEventCache(time.Minute, time.Minute)
		for range 5 {
			got, err := cached.Event(ctx, ev.ID)
			require.NoError(t, err)
			require.Equal(t, ev.ID, got.ID)
		}
		require.EqualValues(t, 1, catalog.EventReads(cached))
	})

	t.Run("ConcurrentReadersShareOneLoad", func(t *testing.T) {
		t.Parallel()
		cached := plain.WithEventCache(time.Minute, time.Minute)
		unknown := uuid.New()
		var g errgroup.Group
		for range 64 {
			g.Go(func() error {
				if _, err := cached.Event(ctx, unknown); !errors.Is(err, catalog.ErrNotFound) {
					return fmt.Errorf("got %v", err)
				}
				return nil
			})
		}
		require.NoError(t, g.Wait())
		require.LessOrEqual(t, catalog.EventReads(cached), int64(2))
	})

	t.Run("BoundedWhateverTheIds", func(t *testing.T) {
		t.Parallel()
		cached := plain.WithEventCache(time.Minute, time.Minute)
		for range catalog.MaxCached + 100 {
			_, err := cached.Event(ctx, uuid.New())
			require.ErrorIs(t, err, catalog.ErrNotFound)
		}
		require.LessOrEqual(t, catalog.CachedEvents(cached), catalog.MaxCached)
	})

	t.Run("CreatedEventIsNoLongerUnknown", func(t *testing.T) {
		t.Parallel()
		cached := plain.WithEventCache(time.Minute, time.Minute)
		created, err := cached.CreateEvent(ctx, catalog.EventParams{
			OrganizerID: uuid.New(), Name: "new", StartsAt: time.Now().Add(time.Hour), Currency: "eur", Cell: "default",
			Sections: []catalog.Section{{Name: "A", Rows: 1, SeatsPerRow: 1, PriceMinor: 1}},
		})
		require.NoError(t, err)
		got, err := cached.Event(ctx, created.ID)
		require.NoError(t, err)
		require.Equal(t, created.ID, got.ID)
	})
}

func TestSeatMapVersion(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	plain := catalog.New(pool)
	ev, err := plain.CreateEvent(ctx, catalog.EventParams{
		OrganizerID: uuid.New(), Name: "v", StartsAt: time.Now().Add(time.Hour), Currency: "eur", Cell: "default",
		Sections: []catalog.Section{{Name: "A", Rows: 1, SeatsPerRow: 5, PriceMinor: 1000}},
	})
	require.NoError(t, err)
	cached := plain.WithSeatMapCache(time.Minute)
	a, err := cached.SeatMap(ctx, ev.ID)
	require.NoError(t, err)
	b, err := cached.SeatMap(ctx, ev.ID)
	require.NoError(t, err)
	require.Equal(t, a.Version, b.Version, "one cached read, one version")
	c, err := plain.SeatMap(ctx, ev.ID)
	require.NoError(t, err)
	d, err := plain.SeatMap(ctx, ev.ID)
	require.NoError(t, err)
	require.NotEqual(t, c.Version, d.Version, "every read from the database is a new version")
}
