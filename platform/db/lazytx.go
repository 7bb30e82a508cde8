package db

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lazyTx is the transaction WithTx begins on a pool: its BEGIN is not sent
// on its own but in one request with the transaction's first statement
// (pgx's Batch.BeginTx), so every transaction costs one round trip less: a
// transaction of n statements takes n + 1 round trips (its statements and
// COMMIT) instead of n + 2. A transaction that runs no statement sends
// nothing at all.
//
// Once begun it is pgx's own transaction (BatchResults.Tx), so commits,
// rollbacks and savepoints behave exactly as with pgxpool.Pool.Begin.
// A batch, COPY, Prepare, a savepoint or large objects asked for first
// begin it on a round trip of its own. The connection goes back to the
// pool after Commit or Rollback.
type lazyTx struct {
	conn *pgxpool.Conn
	tx   pgx.Tx // nil until begun
	done bool
}

// beginLazy acquires a connection for a lazyTx.
func beginLazy(ctx context.Context, pool *pgxpool.Pool) (*lazyTx, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &lazyTx{conn: conn}, nil
}

// begin begins the transaction on its own round trip.
func (t *lazyTx) begin(ctx context.Context) (pgx.Tx, error) {
	if t.done {
		return nil, pgx.ErrTxClosed
	}
	if t.tx != nil {
		return t.tx, nil
	}
	tx, err := t.conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	t.tx = tx
	return tx, nil
}

// first sends BEGIN and the first statement in one batch. The batch must
// be closed before the transaction is used again.
func (t *lazyTx) first(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(sql, args...)
	br := t.conn.SendBatch(ctx, b)
	t.tx = br.Tx()
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

func (t *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	switch {
	case t.done:
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	case t.tx != nil:
		return t.tx.Exec(ctx, sql, args...)
	}
	br, err := t.first(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (t *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	switch {
	case t.done:
		return nil, pgx.ErrTxClosed
	case t.tx != nil:
		return t.tx.Query(ctx, sql, args...)
	}
	br, err := t.first(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (t *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.tx != nil && !t.done {
		return t.tx.QueryRow(ctx, sql, args...)
	}
	rows, err := t.Query(ctx, sql, args...)
	return &firstRow{rows: rows, err: err}
}

func (t *lazyTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	tx, err := t.begin(ctx)
	if err != nil {
		return &failedBatch{err: err}
	}
	return tx.SendBatch(ctx, b)
}

func (t *lazyTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return 0, err
	}
	return tx.CopyFrom(ctx, table, columns, src)
}

func (t *lazyTx) LargeObjects() pgx.LargeObjects {
	tx, err := t.begin(context.Background())
	if err != nil {
		return pgx.LargeObjects{}
	}
	return tx.LargeObjects()
}

func (t *lazyTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Prepare(ctx, name, sql)
}

func (t *lazyTx) Conn() *pgx.Conn { return t.conn.Conn() }

// Begin starts a savepoint (pgx's pseudo nested transaction).
func (t *lazyTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Begin(ctx)
}

func (t *lazyTx) Commit(ctx context.Context) error {
	return t.end(func(tx pgx.Tx) error { return tx.Commit(ctx) })
}

func (t *lazyTx) Rollback(ctx context.Context) error {
	return t.end(func(tx pgx.Tx) error { return tx.Rollback(ctx) })
}

// end commits or rolls back the transaction, if it began, and gives the
// connection back to the pool (which closes it if it is left in a
// transaction).
func (t *lazyTx) end(fn func(pgx.Tx) error) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	t.done = true
	defer t.conn.Release()
	if t.tx == nil {
		return nil
	}
	return fn(t.tx)
}

// batchRows are the rows of the statement that carried BEGIN; once they
// are read or closed, so is its batch.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// firstRow is QueryRow's row: the first of rows, pgx.ErrNoRows without
// one.
type firstRow struct {
	rows pgx.Rows
	err  error
}

func (r *firstRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// failedBatch is the results of a batch that could not be sent.
type failedBatch struct{ err error }

func (b *failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b *failedBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b *failedBatch) QueryRow() pgx.Row                { return &firstRow{err: b.err} }
func (b *failedBatch) Close() error                     { return b.err }
func (b *failedBatch) Tx() pgx.Tx                       { return nil }
