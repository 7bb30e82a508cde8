// Package migrations holds the schema as SQL files, embedded in the binary,
// and applies them.
//
// Two kinds of file make the schema. The versioned migrations (*.sql at
// the top, NNNNN_name.sql) run once each, in order, under goose: tables,
// indexes, data changes, and the drop of a function signature that a new
// one replaces. The database functions (functions/*.sql, one
// CREATE OR REPLACE FUNCTION a file) are repeatable definitions, like
// Flyway's R__ migrations: each file is the function's only definition,
// and Up applies all of them after the versioned migrations on every run.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"slices"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// FS holds the versioned migrations at its root, in the order goose
// applies them, and the database functions in functions/ (which goose does
// not read: it looks only at the root).
//
//go:embed *.sql functions/*.sql
var FS embed.FS

// Unfenced are the tables without the region_fence trigger
// (00010_region_fence.sql), each for its reason; every other table has it:
//   - region_epoch: the fence's own epoch, raised by the failover;
//   - goose_db_version: the migrations' bookkeeping;
//   - free_seats (00042): written only by triggers of fenced tables, whose
//     fence refuses a stale region's write before the trigger runs.
var Unfenced = []string{"region_epoch", "goose_db_version", "free_seats"}

// functionsGlob names the repeatable function definitions in FS.
const functionsGlob = "functions/*.sql"

// Up applies every pending migration to the database at databaseURL, then
// every database function definition.
//
// It is safe to run twice, and from several processes at once: a
// PostgreSQL session advisory lock serialises concurrent runs, and each run
// applies only the versions the database does not have yet. The function
// definitions are applied on every run, after the versions, in one
// transaction under the same advisory lock (as a transaction lock), in
// file name order; CREATE OR REPLACE makes a run whose files did not
// change leave the functions as they were. So the database runs exactly
// the bodies in functions/ once Up returns nil. A versioned migration must
// therefore not call a function of functions/: on a fresh database it does
// not exist yet when the versions run.
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
	if err := applyFunctions(ctx, db); err != nil {
		return fmt.Errorf("apply database functions: %w", err)
	}
	return nil
}

// applyFunctions runs every file of functionsGlob, in name order, in one
// transaction: either all the definitions take effect or none does. The
// transaction holds goose's advisory lock id, so it never runs beside a
// versioned migration, nor beside another run's definitions (two
// concurrent CREATE OR REPLACE of one function can fail with "tuple
// concurrently updated").
func applyFunctions(ctx context.Context, db *sql.DB) error {
	files, err := fs.Glob(FS, functionsGlob)
	if err != nil {
		return fmt.Errorf("list %s: %w", functionsGlob, err)
	}
	slices.Sort(files)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", lock.DefaultLockID); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	for _, name := range files {
		body, err := fs.ReadFile(FS, name)
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			return fmt.Errorf("apply %s: %w", name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// The pgx driver registers itself as "pgx" for database/sql.
var _ = stdlib.GetDefaultDriver
