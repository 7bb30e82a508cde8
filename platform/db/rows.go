package db

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Rows is a kind of row that a transaction writes and never reads back
// (an outbox event): Queue holds each row until the transaction commits,
// and the rows of one kind go with the COMMIT as Write's statements, one
// for all of them where Write can, instead of a statement each. What a
// statement costs the server besides its rows (executor start-up, the
// region fence's trigger on each table it writes) is then paid once a
// transaction, not once a row.
//
// Queued rows go to the server before anything Deferring's writes go
// before (a batch, COPY, a savepoint) and before Flush returns, so that a
// rollback to a savepoint never undoes them; a rollback drops them. Rows
// of one kind queued by different units of work (Attribute) go as one
// statement per unit, so that a failed one names its unit.
type Rows[R any] struct {
	// Write writes rows (at least one), in the order given, on d. For
	// queued rows d queues Write's statements (Exec only) with the
	// transaction's COMMIT; their failure fails the commit, wrapping
	// ErrDeferredWrite.
	Write func(ctx context.Context, d DBTX, rows []R) error
}

// Queue queues row on tx, a transaction WithTx began, to be written with
// tx's COMMIT, after the rows of the same kind queued before it. On any
// other transaction (a savepoint, one begun elsewhere) it is written at
// once, alone. Queue fails only when tx has ended or has already failed.
func (k *Rows[R]) Queue(ctx context.Context, tx pgx.Tx, row R) error {
	lazy := lazyOf(tx)
	if lazy == nil {
		return k.Write(ctx, InterpretingTx(tx), []R{row})
	}
	switch {
	case lazy.done:
		return pgx.ErrTxClosed
	case lazy.err != nil:
		return lazy.err
	}
	for _, q := range lazy.rows {
		if q, ok := q.(*rowQueue[R]); ok && q.kind == k && q.unit == lazy.unit {
			q.rows = append(q.rows, row)
			return nil
		}
	}
	lazy.rows = append(lazy.rows, &rowQueue[R]{kind: k, unit: lazy.unit, rows: []R{row}})
	return nil
}

// queuedRows is the rows of one kind, queued by one unit (Attribute),
// that a lazyTx holds.
type queuedRows interface {
	// write has the kind's Write queue its statements on t, as the
	// unit's.
	write(ctx context.Context, t *lazyTx) error
}

type rowQueue[R any] struct {
	kind *Rows[R]
	unit any
	rows []R
}

func (q *rowQueue[R]) write(ctx context.Context, t *lazyTx) error {
	return q.kind.Write(ctx, rowWriter{t: t, unit: q.unit}, q.rows)
}

// queueRows turns the rows t holds into deferred writes, after those
// already deferred: Write's statements, in the order the kinds were first
// queued. A Write that fails fails the transaction.
func (t *lazyTx) queueRows(ctx context.Context) error {
	if len(t.rows) == 0 {
		return nil
	}
	rows := t.rows
	t.rows = nil
	for _, q := range rows {
		if err := q.write(ctx, t); err != nil {
			t.err = err
			return err
		}
	}
	return nil
}

// rowWriter is the DBTX a Rows kind's Write gets for queued rows: Exec
// defers its statement, as unit's; nothing can be read.
type rowWriter struct {
	t    *lazyTx
	unit any
}

var errRowsRead = errors.New("db.Rows: Write may only Exec on queued rows")

func (w rowWriter) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	w.t.deferred = append(w.t.deferred, deferredWrite{sql: sql, args: args, unit: w.unit})
	return pgconn.CommandTag{}, nil
}

func (rowWriter) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errRowsRead
}

func (rowWriter) QueryRow(context.Context, string, ...any) pgx.Row {
	return &firstRow{err: errRowsRead}
}

func (rowWriter) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, errRowsRead
}
