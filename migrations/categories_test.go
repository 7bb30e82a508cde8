package migrations_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"boxoffice/migrations"
)

// 00035 gives existing events one price category per section, priced as
// their seats were: a section at several prices gets one per price.
func TestPriceCategoriesBackfill(t *testing.T) {
	t.Parallel()
	url := emptyDatabase(t)
	ctx := context.Background()
	sqlDB, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer sqlDB.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, sqlDB, migrations.FS)
	require.NoError(t, err)
	_, err = provider.UpTo(ctx, 34)
	require.NoError(t, err)

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `
		INSERT INTO organizers (id) VALUES ('00000000-0000-0000-0000-000000000001');
		INSERT INTO events (id, organizer_id, name, starts_at, currency, purchase_cell, seat_count)
		VALUES ('00000000-0000-0000-0000-0000000000e1', '00000000-0000-0000-0000-000000000001', 'old', now(), 'eur', 'default', 4);
		INSERT INTO seats (id, event_id, position, section, label, price_minor) VALUES
		  (gen_random_uuid(), '00000000-0000-0000-0000-0000000000e1', 0, 'Floor', 'A-1', 9000),
		  (gen_random_uuid(), '00000000-0000-0000-0000-0000000000e1', 1, 'Floor', 'A-2', 9000),
		  (gen_random_uuid(), '00000000-0000-0000-0000-0000000000e1', 2, 'Box', '1', 100),
		  (gen_random_uuid(), '00000000-0000-0000-0000-0000000000e1', 3, 'Box', '2', 200)`)
	require.NoError(t, err)

	require.NoError(t, migrations.Up(ctx, url))
	got := queryStrings(t, conn, `SELECT c.name || '=' || c.price_minor || 'x' || count(s.id)
		FROM price_categories c JOIN seats s ON s.category_id = c.id AND s.price_minor = c.price_minor
		GROUP BY c.id ORDER BY c.position`)
	require.Equal(t, []string{"Floor=9000x2", "Box · 100=100x1", "Box · 200=200x1"}, got)
}
