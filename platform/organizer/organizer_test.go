package organizer_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/organizer"
	"boxoffice/testkit/dbtest"
)

// Ensure creates an organizer's row on the first use of its id and is a
// no-op after it.
func TestEnsureCreatesTheRowOnce(t *testing.T) {
	t.Parallel()
	ctx, pool := context.Background(), dbtest.New(t)
	id := uuid.New()
	require.NoError(t, organizer.Ensure(ctx, pool, id))
	var first any
	require.NoError(t, pool.QueryRow(ctx, "SELECT created_at FROM organizers WHERE id = $1", id).Scan(&first))
	require.NoError(t, organizer.Ensure(ctx, pool, id), "a second use of the id")
	var n int
	var created any
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), min(created_at) FROM organizers WHERE id = $1", id).Scan(&n, &created))
	require.Equal(t, 1, n)
	require.Equal(t, first, created, "the row is left as it was")
}
