package db

import (
	"context"
	"errors"
	"time"

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
//
// It also carries writes deferred by Deferring: they are queued, not
// sent, and go in the request of the transaction's next statement, or with
// its COMMIT, so a write whose result the caller does not read costs no
// round trip of its own.
type lazyTx struct {
	conn *pgxpool.Conn
	tx   pgx.Tx // nil until begun
	done bool
	// deferred are the queued writes, in the order they were asked for.
	deferred []deferredWrite
	// rows are the rows queued by Rows.Queue, a queue per kind, in the
	// order the kinds were first queued: they become deferred writes
	// when the transaction commits or sends its deferred writes on their
	// own (queueRows).
	rows []queuedRows
	// err is the failure of a deferred write (its statement's, or its
	// check's): once set, every later statement and the commit return
	// it, so the transaction can only roll back.
	err error
	// unit is what the writes deferred and the rows queued from now on
	// belong to (Attribute): a failure of one names it.
	unit any
}

// deferredWrite is one write queued by Deferring.
type deferredWrite struct {
	sql  string
	args []any
	unit any // the transaction's unit when it was deferred
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

// direct reports whether a statement can go to the server as it is: the
// transaction has begun and no write waits to go with it.
func (t *lazyTx) direct() bool { return t.tx != nil && len(t.deferred) == 0 && t.err == nil }

// first sends, in one batch, BEGIN (unless the transaction has begun), the
// deferred writes and then sql, and reads the results of all but sql's.
// The batch must be closed before the
// transaction is used again. A failed deferred write fails the
// transaction (lazyTx.err).
func (t *lazyTx) first(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	if t.err != nil {
		return nil, t.err
	}
	b := &pgx.Batch{}
	begin := t.tx == nil
	if begin {
		b.BeginTx(pgx.TxOptions{})
	}
	writes := t.deferred
	t.deferred = nil
	for _, w := range writes {
		b.Queue(w.sql, w.args...)
	}
	b.Queue(sql, args...)
	var br pgx.BatchResults
	if begin {
		br = t.conn.SendBatch(ctx, b)
		t.tx = br.Tx()
	} else {
		br = t.tx.SendBatch(ctx, b)
	}
	if begin {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	if err := readDeferred(br, writes); err != nil {
		_ = br.Close()
		t.err = err
		return nil, err
	}
	return br, nil
}

// readDeferred reads the results of writes from br, in order. Its error
// is a *DeferredWriteError naming the failed write's unit.
func readDeferred(br pgx.BatchResults, writes []deferredWrite) error {
	for _, w := range writes {
		if _, err := br.Exec(); err != nil {
			return &DeferredWriteError{Unit: w.unit, Err: Interpret(err)}
		}
	}
	return nil
}

// flush sends the deferred writes and the queued rows, if any, on a
// round trip of their own: before anything that cannot carry them (a
// batch, COPY, a savepoint).
func (t *lazyTx) flush(ctx context.Context) error {
	if t.err != nil {
		return t.err
	}
	if err := t.queueRows(ctx); err != nil {
		return err
	}
	if len(t.deferred) == 0 {
		return nil
	}
	if t.tx == nil {
		if _, err := t.begin(ctx); err != nil {
			return err
		}
	}
	writes := t.deferred
	t.deferred = nil
	b := &pgx.Batch{}
	for _, w := range writes {
		b.Queue(w.sql, w.args...)
	}
	br := t.tx.SendBatch(ctx, b)
	err := readDeferred(br, writes)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = &DeferredWriteError{Unit: writes[len(writes)-1].unit, Err: cerr}
	}
	if err != nil {
		t.err = err
	}
	return err
}

func (t *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	switch {
	case t.done:
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	case t.direct():
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
	case t.direct():
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
	if t.direct() && !t.done {
		return t.tx.QueryRow(ctx, sql, args...)
	}
	rows, err := t.Query(ctx, sql, args...)
	return &firstRow{rows: rows, err: err}
}

func (t *lazyTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	tx, err := t.begin(ctx)
	if err == nil {
		err = t.flush(ctx)
	}
	if err != nil {
		return &failedBatch{err: err}
	}
	return tx.SendBatch(ctx, b)
}

func (t *lazyTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	tx, err := t.begin(ctx)
	if err == nil {
		err = t.flush(ctx)
	}
	if err != nil {
		return 0, err
	}
	return tx.CopyFrom(ctx, table, columns, src)
}

func (t *lazyTx) LargeObjects() pgx.LargeObjects {
	tx, err := t.begin(context.Background())
	if err == nil {
		err = t.flush(context.Background())
	}
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

// Conn is the transaction's connection. Statements run on it directly
// bypass the deferred writes: send them first (Flush).
func (t *lazyTx) Conn() *pgx.Conn { return t.conn.Conn() }

// Begin starts a savepoint (pgx's pseudo nested transaction), after
// sending the deferred writes, which a rollback to the savepoint must not
// undo.
func (t *lazyTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.begin(ctx)
	if err == nil {
		err = t.flush(ctx)
	}
	if err != nil {
		return nil, err
	}
	return tx.Begin(ctx)
}

// Commit commits the transaction. Deferred writes and queued rows go in
// the request of the COMMIT (with BEGIN too when they are all the
// transaction did): when one fails, the server skips the COMMIT, nothing
// is committed and the error (wrapping ErrDeferredWrite) is returned.
func (t *lazyTx) Commit(ctx context.Context) error {
	if t.err == nil && !t.done {
		_ = t.queueRows(ctx)
	}
	if t.err != nil {
		_ = t.Rollback(ctx)
		return t.err
	}
	if len(t.deferred) == 0 {
		return t.end(func(tx pgx.Tx) error { return tx.Commit(ctx) })
	}
	if t.done {
		return pgx.ErrTxClosed
	}
	t.done = true
	defer t.conn.Release()
	writes := t.deferred
	t.deferred = nil
	b := &pgx.Batch{}
	begin := t.tx == nil
	if begin {
		b.BeginTx(pgx.TxOptions{})
	}
	for _, w := range writes {
		b.Queue(w.sql, w.args...)
	}
	b.Queue("commit")
	var br pgx.BatchResults
	if begin {
		br = t.conn.SendBatch(ctx, b)
	} else {
		br = t.tx.SendBatch(ctx, b)
	}
	err := t.readCommit(br, begin, writes)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil && t.conn.Conn().PgConn().TxStatus() != 'I' {
		// A failed statement skipped the COMMIT: the transaction is
		// still open, aborted. The pool closes a connection released
		// in a transaction; rolling back keeps it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = t.conn.Exec(rctx, "rollback")
	}
	return err
}

// readCommit reads the results of Commit's batch: BEGIN when begin, the
// deferred writes, and the COMMIT, which PostgreSQL answers with ROLLBACK
// for a transaction that had failed.
func (t *lazyTx) readCommit(br pgx.BatchResults, begin bool, writes []deferredWrite) error {
	if begin {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if err := readDeferred(br, writes); err != nil {
		return err
	}
	tag, err := br.Exec()
	if err != nil {
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Rollback rolls back the transaction; deferred writes and queued rows
// are dropped unsent.
func (t *lazyTx) Rollback(ctx context.Context) error {
	t.deferred, t.rows = nil, nil
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

// ErrDeferredWrite wraps the failure of a write Deferring queued, returned
// by the statement or the commit it went with.
var ErrDeferredWrite = errors.New("deferred write failed")

// DeferredWriteError is the failure of a deferred write or a queued row,
// as returned by the statement, Flush or commit it went with: it is
// ErrDeferredWrite and Err (interpreted), and names the unit the write
// belonged to (Attribute), nil when none was set.
type DeferredWriteError struct {
	Unit any
	Err  error
}

func (e *DeferredWriteError) Error() string { return ErrDeferredWrite.Error() + ": " + e.Err.Error() }

func (e *DeferredWriteError) Unwrap() []error { return []error{ErrDeferredWrite, e.Err} }

// Attribute makes unit the owner of the writes deferred and the rows
// queued on tx from now on, until the next Attribute: when one of them
// fails, whichever statement, Flush or commit it went with returns a
// *DeferredWriteError naming unit. A caller running several independent
// units of work in one transaction (a consumer's batch of events) so
// learns whose write failed without sending each unit's writes on a round
// trip of their own; rows of one kind queued by different units go as one
// statement per unit. On a transaction WithTx did not begin it does
// nothing: writes there run at once.
func Attribute(tx pgx.Tx, unit any) {
	if lazy := lazyOf(tx); lazy != nil {
		lazy.unit = unit
	}
}

// Deferring returns a DBTX for tx on which Exec does not send its
// statement but queues it, to go in the same request as tx's next
// statement (Exec, Query or QueryRow, on tx or on another Deferring of it)
// or its COMMIT: a write whose result the caller does not need before
// going on (an outbox row, a status move under a lock already held) then
// costs no round trip of its own. Writes go to the server in the order
// they were asked for, before the statement they go with, which sees them.
//
// Exec returns an empty command tag and a nil error: its result is not
// known yet. A write that must check what it did makes the server check
// it (expect_rows in migrations/functions), so that its failure fails the
// statement or the commit it went with (the COMMIT is then skipped), as
// an error wrapping ErrDeferredWrite; the transaction can then only roll
// back, and later statements and Commit return the same error. Deferred
// writes are sent on their own before a batch, COPY or savepoint, and
// dropped by a rollback.
//
// Only a transaction WithTx began on a pool defers; on any other
// transaction (a savepoint, one begun elsewhere) Exec runs at once. Query
// and QueryRow are tx's.
func Deferring(tx pgx.Tx) DBTX {
	lazy := lazyOf(tx)
	if lazy == nil {
		return InterpretingTx(tx)
	}
	return deferring{DBTX: InterpretingTx(tx), lazy: lazy}
}

// lazyOf returns the lazyTx tx is (interpreting or not), or nil.
func lazyOf(tx pgx.Tx) *lazyTx {
	if it, ok := tx.(interpretingTx); ok {
		tx = it.Tx
	}
	lazy, _ := tx.(*lazyTx)
	return lazy
}

// deferring is Deferring's DBTX on a lazyTx.
type deferring struct {
	DBTX
	lazy *lazyTx
}

func (d deferring) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	switch {
	case d.lazy.done:
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	case d.lazy.err != nil:
		return pgconn.CommandTag{}, d.lazy.err
	}
	d.lazy.deferred = append(d.lazy.deferred, deferredWrite{sql: sql, args: args, unit: d.lazy.unit})
	return pgconn.CommandTag{}, nil
}

// Flush sends tx's deferred writes and queued rows now, on a round trip of
// their own if there are any (none: nothing is sent), and returns their
// failure: before a statement run on tx.Conn(), which would bypass them.
// A caller running several independent units of work in one transaction
// need not flush between them to learn whose write failed: Attribute
// tells it without the round trips.
func Flush(ctx context.Context, tx pgx.Tx) error {
	if lazy := lazyOf(tx); lazy != nil {
		return Interpret(lazy.flush(ctx))
	}
	return nil
}
