// Package db holds the one transaction helper every write goes through, the
// mapping of PostgreSQL errors to domain sentinels, and pool construction.
package db

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxuuid "github.com/vgarvardt/pgx-google-uuid/v5"

	"boxoffice/platform/backoff"
	"boxoffice/platform/fault"
)

// ErrNotFound is returned when a row that was asked for does not exist (or
// is not visible to the caller).
var ErrNotFound = fault.New(fault.CodeNotFound, "not found")

// ErrConflict is returned when a write violates a unique constraint.
var ErrConflict = fault.New(fault.CodeConflict, "conflict")

// Executor is what a transaction can be begun on: a pool, a connection or
// a transaction (which then nests as a savepoint).
type Executor interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// maxAttempts bounds how often WithTx re-runs a transaction that lost a
// serialization or deadlock race.
const maxAttempts = 5

// retrySchedule is Retry's wait after a failed attempt: full jitter over a
// window that grows with each attempt, 0–10 ms, 0–20 ms, …, so racing
// transactions spread out instead of colliding again.
var retrySchedule = backoff.Policy{Base: 10 * time.Millisecond, Power: 1, Jitter: backoff.Jitter{Below: 1}}

// WithTx runs fn in a transaction and commits it when fn returns nil.
//
// When PostgreSQL aborts the transaction with a serialization failure or a
// deadlock, WithTx rolls back and runs fn again, up to maxAttempts times
// with bounded jittered sleeps, so these races never reach a client; fn must
// therefore be safe to re-run (it must not have effects outside tx). Any
// other error from fn rolls the transaction back and is returned unchanged.
//
// The transaction fn is given returns its errors through Interpret (see
// Interpreting): a missing row is ErrNotFound, a unique violation
// ErrConflict, wherever in fn the statement ran.
func WithTx(ctx context.Context, db Executor, fn func(ctx context.Context, tx pgx.Tx) error) error {
	_, err := WithTxV(ctx, db, func(ctx context.Context, tx pgx.Tx) (struct{}, error) {
		return struct{}{}, fn(ctx, tx)
	})
	return err
}

// WithTxV is WithTx for a function that returns a value.
func WithTxV[T any](ctx context.Context, db Executor, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	return Retry(ctx, func(ctx context.Context) (T, error) { return runTx(ctx, db, fn) })
}

// Retry runs fn — one statement that is its own transaction, or a whole
// transaction — again when PostgreSQL aborted it with a serialization
// failure or a deadlock, up to maxAttempts times with bounded jittered
// sleeps. Other errors are returned at once.
func Retry[T any](ctx context.Context, fn func(ctx context.Context) (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := fn(ctx)
		if err == nil || !retryable(err) || attempt == maxAttempts {
			return v, err
		}
		select {
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		case <-time.After(retrySchedule.Delay(attempt)):
		}
	}
}

func runTx[T any](ctx context.Context, db Executor, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var zero T
	var tx pgx.Tx
	var err error
	if pool, ok := db.(*pgxpool.Pool); ok {
		// BEGIN travels with the first statement (lazyTx).
		tx, err = beginLazy(ctx, pool)
	} else {
		tx, err = db.Begin(ctx)
	}
	if err != nil {
		return zero, fmt.Errorf("begin: %w", err)
	}
	defer rollback(ctx, tx)
	v, err := fn(ctx, interpretingTx{tx})
	if err != nil {
		return zero, err
	}
	if err := tx.Commit(ctx); err != nil {
		return zero, fmt.Errorf("commit: %w", err)
	}
	return v, nil
}

// rollback ends tx if it is still open. It runs even when ctx is canceled,
// so a canceled request never leaves a transaction holding locks.
func rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(ctx) // ErrTxClosed after a commit; nothing to do either way.
}

// retryable reports whether PostgreSQL aborted a transaction only because it
// raced another one, so that running it again can succeed.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "40001", "40P01": // serialization_failure, deadlock_detected
		return true
	}
	return false
}

// Interpret maps errors at the database edge to the package's sentinels:
// pgx.ErrNoRows → ErrNotFound and unique violations → ErrConflict. The
// result wraps the original too, so errors.Is(err, pgx.ErrNoRows) still
// holds and the constraint stays inspectable with ConstraintName, and it
// keeps the original's message. Other errors are returned unchanged, and
// so is an error Interpret already saw: applying it twice is applying it
// once.
//
// A DBTX from Interpreting, and the transaction WithTx hands its function,
// return errors that already went through Interpret: callers of sqlcgen's
// queries on them test errors.Is(err, ErrNotFound) with nothing to apply.
func Interpret(err error) error {
	if err == nil {
		return nil
	}
	var seen *interpreted
	if errors.As(err, &seen) {
		return err
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return &interpreted{sentinel: ErrNotFound, cause: err}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return &interpreted{sentinel: ErrConflict, cause: err}
	}
	return err
}

// interpreted is an error Interpret mapped to sentinel: it is both the
// sentinel and its cause for errors.Is and errors.As, and reads as the
// cause.
type interpreted struct {
	sentinel error
	cause    error
}

func (e *interpreted) Error() string   { return e.cause.Error() }
func (e *interpreted) Unwrap() []error { return []error{e.sentinel, e.cause} }

// regionEpochParam is the session setting the region_fence trigger reads
// (migrations/00010_region_fence.sql).
const regionEpochParam = "boxoffice.region_epoch"

// fencedState is the SQLSTATE the region_fence trigger raises.
const fencedState = "BXF01"

// IsFenced says whether err is the database refusing a write because the
// session's region epoch is no longer the current one: the process belongs
// to a region that was failed over, and must not write anything.
func IsFenced(err error) bool { return SQLState(err) == fencedState }

// IsUnavailable says whether err is the database not answering rather than
// refusing: it cannot be reached, the connection broke, or the server is
// shutting down or starting up (SQLSTATE class 57P). For a purchase cell
// this means the cell is down; the request may be retried later.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	return strings.HasPrefix(SQLState(err), "57P")
}

// IsBusy says whether err is a statement the pool's own limits ended:
// lock_timeout (55P03, a lock held elsewhere for too long) or
// statement_timeout (57014). The database answers, but what the statement
// needed was busy; the same request may succeed shortly.
func IsBusy(err error) bool {
	switch SQLState(err) {
	case "55P03", "57014":
		return true
	}
	return false
}

// SQLState returns the SQLSTATE code of a PostgreSQL error, or "".
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// ConstraintName returns the name of the constraint err violated, or "".
func ConstraintName(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.ConstraintName
	}
	return ""
}

// Configure prepares every connection of a pool the way the application
// expects: google/uuid values, and pointers to them, are encoded and
// scanned natively instead of through their text form, which the hold
// path would otherwise pay for on every seat id.
func Configure(pc *pgxpool.Config) {
	prev := pc.AfterConnect
	pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		pgxuuid.Register(conn.TypeMap())
		m := conn.TypeMap()
		m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapUUIDPointer}, m.TryWrapEncodePlanFuncs...)
		if prev != nil {
			return prev(ctx, conn)
		}
		return nil
	}
}

// PoolConfig configures NewPool.
type PoolConfig struct {
	// URL is the PostgreSQL connection string. Required.
	URL string
	// MaxConns caps the pool. Defaults to pgxpool's default (4 × CPUs, at
	// least 4).
	MaxConns int32
	// RegionEpoch is the region epoch every session of the pool declares
	// (boxoffice.region_epoch): once the database's epoch is raised past
	// it, every write through the pool fails with IsFenced true. Zero
	// declares none, as an operator's session does: unfenced.
	RegionEpoch int64
	// Tracer sees every query of the pool's connections (a CostTracer,
	// say). Defaults to none.
	Tracer pgx.QueryTracer
	// StatementTimeout and LockTimeout are the sessions' statement_timeout
	// and lock_timeout: a statement running longer, or waiting longer for
	// a lock, fails instead of holding a connection (and every request
	// queued behind it). Zero leaves the server's setting (none, by
	// default).
	StatementTimeout, LockTimeout time.Duration
}

// NewPool opens a pool and checks that the server answers.
func NewPool(ctx context.Context, cfg PoolConfig) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	if cfg.RegionEpoch > 0 {
		pc.ConnConfig.RuntimeParams[regionEpochParam] = strconv.FormatInt(cfg.RegionEpoch, 10)
	}
	if cfg.StatementTimeout > 0 {
		pc.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(cfg.StatementTimeout.Milliseconds(), 10)
	}
	if cfg.LockTimeout > 0 {
		pc.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(cfg.LockTimeout.Milliseconds(), 10)
	}
	Configure(pc)
	if cfg.Tracer != nil {
		pc.ConnConfig.Tracer = cfg.Tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	return pool, nil
}

// CheckConnectionBudget warns on logger when this pool, filled, would take
// the server past its connection limit: the sessions open now (every
// process's pools and others) plus this pool's size over max_connections
// less the connections reserved for superusers. Every role calls it at
// start, so the last process whose pools overcommit the server says so
// before an onsale finds out. A failed read is logged, not returned.
func CheckConnectionBudget(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) {
	var maxConns, reserved, open int
	err := pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
		current_setting('superuser_reserved_connections')::int,
		(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int`).Scan(&maxConns, &reserved, &open)
	if err != nil {
		logger.WarnContext(ctx, "connection budget: cannot read the server's limits", "error", err.Error())
		return
	}
	mine := int(pool.Stat().MaxConns())
	inUse := int(pool.Stat().TotalConns())
	if others := open - inUse; others+mine > maxConns-reserved {
		logger.WarnContext(ctx, "connection budget: the pools can exceed the server's connection limit",
			"pool_max_connections", mine, "other_sessions", others, "max_connections", maxConns,
			"superuser_reserved_connections", reserved)
	}
}
