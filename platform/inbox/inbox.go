// Package inbox is the one writer of the inbox table: which events each
// durable consumer has applied, one row per (consumer, event id). The
// consumer runtime (package consumers) records a batch's events in the
// transaction that applies them, so an event delivered again is applied
// at most once; the retention worker (ops/retention) deletes rows past
// their retention.
//
// Each function is one statement on the caller's connection or
// transaction; errors are the database's, for the caller to wrap.
package inbox

import (
	"context"

	"github.com/google/uuid"

	"boxoffice/platform/db"
	"boxoffice/sqlcgen"
)

// Record records, in tx, that consumer applied each of eventIDs and
// returns the ids that were not recorded before: the caller applies the
// effects of those, and only those, in the same transaction. An id given
// twice is returned once.
func Record(ctx context.Context, tx db.DBTX, consumer string, eventIDs []uuid.UUID) ([]uuid.UUID, error) {
	return sqlcgen.New().InboxInsertMany(ctx, tx, sqlcgen.InboxInsertManyParams{Consumer: consumer, EventIds: eventIDs})
}

// Applied returns which of eventIDs consumer has applied already. A
// consumer that calls out before its transaction reads it first, to skip
// the call for a redelivery; Record in the transaction stays the guard.
func Applied(ctx context.Context, d db.DBTX, consumer string, eventIDs []uuid.UUID) ([]uuid.UUID, error) {
	return sqlcgen.New().InboxAppliedMany(ctx, d, sqlcgen.InboxAppliedManyParams{Consumer: consumer, EventIds: eventIDs})
}
