package db

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what sqlcgen's queries run on (sqlcgen.DBTX): a pool, a
// connection or a transaction.
type DBTX interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
	CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error)
}

// Interpreting returns d with every error it returns (from Exec, Query,
// CopyFrom, a row's Scan, the rows' Scan and Err) passed through
// Interpret, so that a query run on it reports a missing row as
// ErrNotFound and a unique violation as ErrConflict at the point the
// database is read. Results are otherwise d's, unchanged. Interpreting an
// interpreting DBTX returns it as is.
func Interpreting(d DBTX) DBTX {
	switch d.(type) {
	case interpreting, interpretingTx:
		return d
	}
	return interpreting{d}
}

type interpreting struct{ d DBTX }

func (i interpreting) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := i.d.Exec(ctx, sql, args...)
	return tag, Interpret(err)
}

func (i interpreting) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return interpretRows(i.d.Query(ctx, sql, args...))
}

func (i interpreting) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return interpretedRow{i.d.QueryRow(ctx, sql, args...)}
}

func (i interpreting) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	n, err := i.d.CopyFrom(ctx, table, columns, src)
	return n, Interpret(err)
}

// interpretingTx is a transaction whose statements' errors go through
// Interpret; WithTx hands one to its function. Savepoints begun on it are
// interpreting too. Commit, Rollback, batches and the rest are tx's.
type interpretingTx struct{ pgx.Tx }

func (t interpretingTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return interpretingTx{tx}, nil
}

// The statements of an interpretingTx are those of interpreting, on tx.

func (t interpretingTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return interpreting{t.Tx}.Exec(ctx, sql, args...)
}

func (t interpretingTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return interpreting{t.Tx}.Query(ctx, sql, args...)
}

func (t interpretingTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return interpreting{t.Tx}.QueryRow(ctx, sql, args...)
}

func (t interpretingTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	return interpreting{t.Tx}.CopyFrom(ctx, table, columns, src)
}

func interpretRows(rows pgx.Rows, err error) (pgx.Rows, error) {
	if err != nil {
		return rows, Interpret(err)
	}
	return interpretedRows{rows}, nil
}

type interpretedRow struct{ row pgx.Row }

func (r interpretedRow) Scan(dest ...any) error { return Interpret(r.row.Scan(dest...)) }

type interpretedRows struct{ pgx.Rows }

func (r interpretedRows) Scan(dest ...any) error { return Interpret(r.Rows.Scan(dest...)) }
func (r interpretedRows) Err() error             { return Interpret(r.Rows.Err()) }

// InterpretingTx is Interpreting for a transaction: tx, with the errors of
// its statements passed through Interpret. The transaction WithTx hands
// its function is one already; a function that is handed a transaction
// from elsewhere uses InterpretingTx to rely on ErrNotFound and
// ErrConflict whoever began it.
func InterpretingTx(tx pgx.Tx) pgx.Tx {
	if t, ok := tx.(interpretingTx); ok {
		return t
	}
	return interpretingTx{tx}
}
