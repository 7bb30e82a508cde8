// Package migrations holds the schema as ordered SQL files, embedded in the
// binary, and applies them.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// FS holds the migration files in the order goose applies them.
//
//go:embed *.sql
var FS embed.FS

// Up applies every pending migration to the database at databaseURL.
//
// It is safe to run twice, and from several processes at once: a
// PostgreSQL session advisory lock serialises concurrent runs, and each run
// applies only the versions the database does not have yet.
func Up(ctx context.Context, databaseURL string) error {
	db, err := sql.Open("pgx", databaseURL)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer db.Close()

	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("create migration lock: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, FS, goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("create migration provider: %w", err)
	}
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}

// The pgx driver registers itself as "pgx" for database/sql.
var _ = stdlib.GetDefaultDriver
