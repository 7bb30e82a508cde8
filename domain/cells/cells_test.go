package cells_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/catalog"
	"boxoffice/domain/cells"
	"boxoffice/testkit/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestRouter(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	poolA, poolB := dbtest.New(t), dbtest.New(t)
	a := &cells.Cell{Name: "a", Pool: poolA, Catalog: catalog.New(poolA)}
	b := &cells.Cell{Name: "b", Pool: poolB, Catalog: catalog.New(poolB)}

	t.Run("RefusesBadConfigurations", func(t *testing.T) {
		for _, cs := range [][]*cells.Cell{
			nil,
			{{Name: "A", Pool: poolA}},
			{{Name: "dlq", Pool: poolA}},
			{{Name: "a", Pool: poolA}, {Name: "a", Pool: poolB}},
			{{Name: "a"}},
		} {
			_, err := cells.NewRouter(cs...)
			require.Error(t, err)
		}
	})

	r, err := cells.NewRouter(a, b)
	require.NoError(t, err)

	t.Run("HomeIsStableAndSpread", func(t *testing.T) {
		counts := map[string]int{}
		for range 1000 {
			id := uuid.New()
			home := r.Home(id)
			require.Same(t, home, r.Home(id))
			counts[home.Name]++
		}
		require.InDelta(t, 500, counts["a"], 100, "rendezvous hashing spreads organizers: %v", counts)
		// A third cell takes only organizers that now hash to it.
		c, err := cells.NewRouter(a, b, &cells.Cell{Name: "c", Pool: poolB})
		require.NoError(t, err)
		for range 1000 {
			id := uuid.New()
			if got := c.Home(id); got.Name != "c" {
				require.Equal(t, r.Home(id).Name, got.Name)
			}
		}
	})

	t.Run("ADedicatedCellTakesItsOrganizersAndNoOneElse", func(t *testing.T) {
		star := uuid.New()
		d := &cells.Cell{Name: "stadium", Pool: poolB, Organizers: []uuid.UUID{star}}
		r, err := cells.NewRouter(a, b, d)
		require.NoError(t, err)
		require.Same(t, d, r.Home(star))
		for range 1000 {
			id := uuid.New()
			home := r.Home(id)
			require.NotSame(t, d, home, "a dedicated cell took an organizer it does not name")
			require.Equal(t, routerOf(t, a, b).Home(id).Name, home.Name, "the shared cells hash as if the dedicated one were not there")
		}
		got, err := r.ForOrganizer(ctx, star)
		require.NoError(t, err)
		require.Same(t, d, got, "a new organizer the cell names is placed there")

		_, err = cells.NewRouter(&cells.Cell{Name: "x", Pool: poolA, Organizers: []uuid.UUID{star}})
		require.Error(t, err, "no cell left for the other organizers")
		_, err = cells.NewRouter(a, &cells.Cell{Name: "x", Pool: poolA, Organizers: []uuid.UUID{star}},
			&cells.Cell{Name: "y", Pool: poolB, Organizers: []uuid.UUID{star}})
		require.Error(t, err, "one organizer dedicated to two cells")
	})

	create := func(pool *pgxpool.Pool, cell string) uuid.UUID {
		ev, err := catalog.New(pool).CreateEvent(ctx, catalog.EventParams{
			OrganizerID: uuid.New(), Name: "router", StartsAt: time.Now().Add(time.Hour), Currency: "eur", Cell: cell,
			Sections: []catalog.Section{{Name: "A", Rows: 1, SeatsPerRow: 1}},
		})
		require.NoError(t, err)
		return ev.ID
	}

	t.Run("FindsEachRecordInTheCellThatHoldsIt", func(t *testing.T) {
		inA, inB := create(poolA, "a"), create(poolB, "b")
		got, err := r.ForEvent(ctx, inA)
		require.NoError(t, err)
		require.Same(t, a, got)
		got, err = r.ForEvent(ctx, inB)
		require.NoError(t, err)
		require.Same(t, b, got)
		_, err = r.ForEvent(ctx, uuid.New())
		require.ErrorIs(t, err, cells.ErrNotFound)
	})

	t.Run("ACellThatDoesNotAnswerMakesOnlyItsOwnRecordsUnavailable", func(t *testing.T) {
		inA := create(poolA, "a")
		downPool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
		require.NoError(t, err)
		t.Cleanup(downPool.Close)
		down := &cells.Cell{Name: "down", Pool: downPool}
		r, err := cells.NewRouter(a, down)
		require.NoError(t, err)

		got, err := r.ForEvent(ctx, inA)
		require.NoError(t, err, "found in the cell that answers")
		require.Same(t, a, got)
		_, err = r.ForEvent(ctx, uuid.New())
		require.ErrorIs(t, err, cells.ErrUnavailable, "not found where asked, but it may be in the cell that is down")
		require.NotErrorIs(t, err, cells.ErrNotFound)

		// A new organizer may already live in the cell that is down.
		_, err = r.ForOrganizer(ctx, uuid.New())
		require.ErrorIs(t, err, cells.ErrUnavailable)
	})

	t.Run("OneCellAsksNothing", func(t *testing.T) {
		single := cells.Single(&cells.Cell{Name: "default"})
		got, err := single.ForOrder(context.Background(), uuid.New())
		require.NoError(t, err)
		require.Equal(t, "default", got.Name)
	})
}

func routerOf(t *testing.T, cs ...*cells.Cell) *cells.Router {
	t.Helper()
	r, err := cells.NewRouter(cs...)
	require.NoError(t, err)
	return r
}
