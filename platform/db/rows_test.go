package db_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/db"
	"boxoffice/testkit/dbtest"
)

// Rows a WithTx transaction queues are held until its COMMIT and go with
// it as one statement per kind, in the order they were queued, whatever
// ran between them; a savepoint or Flush sends them first, a rollback
// drops them, a failed one fails the commit, and a transaction WithTx did
// not begin writes each at once.
func TestQueuedRowsGoWithTheCommitAsOneStatement(t *testing.T) {
	t.Parallel()
	pool, costs := dbtest.NewTraced(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE rows_probe (seq int GENERATED ALWAYS AS IDENTITY, n int PRIMARY KEY CHECK (n < 100));
		CREATE TABLE rows_other (n int)`)
	require.NoError(t, err)

	var writes [][]int // what each Write call wrote
	kind := &db.Rows[int]{Write: func(ctx context.Context, d db.DBTX, rows []int) error {
		writes = append(writes, rows)
		_, err := d.Exec(ctx, "INSERT INTO rows_probe (n) SELECT u.n FROM unnest($1::int[]) WITH ORDINALITY AS u(n, ord) ORDER BY u.ord", rows)
		return err
	}}
	other := &db.Rows[int]{Write: func(ctx context.Context, d db.DBTX, rows []int) error {
		_, err := d.Exec(ctx, "INSERT INTO rows_other (n) SELECT unnest($1::int[])", rows)
		return err
	}}
	queue := func(ctx context.Context, tx pgx.Tx, k *db.Rows[int], ns ...int) {
		t.Helper()
		for _, n := range ns {
			require.NoError(t, k.Queue(ctx, tx, n))
		}
	}
	committed := func() []int {
		t.Helper()
		rows, err := pool.Query(ctx, "SELECT n FROM rows_probe ORDER BY seq")
		require.NoError(t, err)
		ns, err := pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(t, err)
		return ns
	}
	run := func(role string, fn func(ctx context.Context, tx pgx.Tx) error) (db.RoleCost, error) {
		t.Helper()
		writes = nil
		return roleCost(ctx, costs, pool, role, fn)
	}

	c, err := run("commit", func(ctx context.Context, tx pgx.Tx) error {
		queue(ctx, tx, kind, 3)
		queue(ctx, tx, other, 1)
		var seen int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM rows_probe").Scan(&seen); err != nil {
			return err
		}
		require.Zero(t, seen, "a statement does not carry queued rows")
		if _, err := db.Deferring(tx).Exec(ctx, "INSERT INTO rows_other VALUES (2)"); err != nil {
			return err
		}
		queue(ctx, tx, kind, 1, 2)
		queue(ctx, tx, other, 3)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, [][]int{{3, 1, 2}}, writes, "one Write for the kind's three rows")
	require.Equal(t, []int{3, 1, 2}, committed(), "in the order queued, seqs too")
	require.Equal(t, int64(2), c.RoundTrips, "BEGIN+SELECT, then the deferred INSERT, both kinds' rows and COMMIT")
	require.Equal(t, int64(4), c.Statements, "SELECT, the deferred INSERT, one INSERT per kind")

	_, err = run("savepoint", func(ctx context.Context, tx pgx.Tx) error {
		queue(ctx, tx, kind, 4)
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		require.Equal(t, [][]int{{4}}, writes, "sent before the savepoint")
		queue(ctx, sp, kind, 5) // a savepoint writes at once
		require.Equal(t, [][]int{{4}, {5}}, writes)
		return sp.Rollback(ctx)
	})
	require.NoError(t, err)
	require.Equal(t, []int{3, 1, 2, 4}, committed(), "4 kept, 5 rolled back with its savepoint")

	boom := errors.New("boom")
	_, err = run("rollback", func(ctx context.Context, tx pgx.Tx) error {
		queue(ctx, tx, kind, 6)
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Empty(t, writes, "dropped unwritten")

	_, err = run("conflict", func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO rows_other VALUES (9)"); err != nil {
			return err
		}
		queue(ctx, tx, kind, 7, 1) // 1 exists
		return nil
	})
	require.ErrorIs(t, err, db.ErrDeferredWrite)
	require.ErrorIs(t, err, db.ErrConflict, "interpreted")
	require.Equal(t, []int{3, 1, 2, 4}, committed(), "the COMMIT skipped: nothing the transaction wrote committed")

	_, err = run("flush", func(ctx context.Context, tx pgx.Tx) error {
		queue(ctx, tx, kind, 100) // breaks the CHECK
		err := db.Flush(ctx, tx)
		require.ErrorIs(t, err, db.ErrDeferredWrite, "Flush sends queued rows and reports them")
		require.ErrorIs(t, kind.Queue(ctx, tx, 8), db.ErrDeferredWrite, "and the transaction can only roll back")
		return err
	})
	require.ErrorIs(t, err, db.ErrDeferredWrite)

	// A transaction not begun by WithTx on a pool writes at once.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, kind.Queue(ctx, tx, 1), db.ErrConflict)
	require.NoError(t, tx.Rollback(ctx))

	// The connections come back clean.
	for range 4 {
		require.Equal(t, []int{3, 1, 2, 4}, committed())
	}
}

// A failed deferred write or queued row names the unit it was written for
// (Attribute), whichever later statement or COMMIT carried it; rows of
// one kind queued by two units go as a statement each.
func TestAttributeNamesTheUnitOfAFailedWrite(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE attr_probe (n int PRIMARY KEY CHECK (n < 100))`)
	require.NoError(t, err)
	var writes [][]int
	kind := &db.Rows[int]{Write: func(ctx context.Context, d db.DBTX, rows []int) error {
		writes = append(writes, rows)
		_, err := d.Exec(ctx, "INSERT INTO attr_probe SELECT unnest($1::int[])", rows)
		return err
	}}
	unitOf := func(err error) any {
		t.Helper()
		var dw *db.DeferredWriteError
		require.ErrorAs(t, err, &dw)
		require.ErrorIs(t, err, db.ErrDeferredWrite)
		return dw.Unit
	}

	// A deferred write of unit "a" fails in unit "b"'s statement.
	err = db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		db.Attribute(tx, "a")
		if _, err := db.Deferring(tx).Exec(ctx, "INSERT INTO attr_probe VALUES (100)"); err != nil {
			return err
		}
		db.Attribute(tx, "b")
		_, err := tx.Exec(ctx, "INSERT INTO attr_probe VALUES (1)")
		return err
	})
	require.Equal(t, "a", unitOf(err))

	// Rows of units "a" and "b" go as two statements with the COMMIT; b's fails.
	writes = nil
	err = db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		db.Attribute(tx, "a")
		require.NoError(t, kind.Queue(ctx, tx, 1))
		db.Attribute(tx, "b")
		require.NoError(t, kind.Queue(ctx, tx, 2))
		require.NoError(t, kind.Queue(ctx, tx, 2)) // a duplicate
		db.Attribute(tx, "a")
		return kind.Queue(ctx, tx, 3)
	})
	require.Equal(t, "b", unitOf(err))
	require.ErrorIs(t, err, db.ErrConflict, "interpreted")
	require.Equal(t, [][]int{{1, 3}, {2, 2}}, writes, "a statement per unit, in the order the units first queued")
	require.EqualValues(t, 0, dbtest.Count(t, pool, "SELECT count(*) FROM attr_probe"), "nothing committed")

	// Without Attribute a failure names no unit.
	err = db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		return kind.Queue(ctx, tx, 200)
	})
	require.Nil(t, unitOf(err))
}
