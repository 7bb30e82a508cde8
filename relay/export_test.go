package relay

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// SetAfterPublishFunc installs a crash injector for tests. f runs after
// JetStream has acknowledged a batch (ids are the acknowledged rows) and
// before the relay deletes them from the outbox. When f returns an error, Run
// returns that error at once and the relay deletes, releases and settles
// nothing more — its claimed rows wait for their lease, exactly as if the
// process had been killed at that point. Call it before Run.
func SetAfterPublishFunc(r *Relay, f func(ctx context.Context, ids []uuid.UUID) error) {
	r.afterPublishFunc = f
}

// Claim runs one claim of up to n rows as the claim loop does, and returns
// the ids claimed, oldest first, and the first seq of their lease.
func Claim(ctx context.Context, r *Relay, n int) ([]uuid.UUID, int64, error) {
	rows, leaseFirst, err := r.claim(ctx, n)
	ids := make([]uuid.UUID, len(rows))
	for i, row := range rows {
		ids[i] = row.ID
	}
	return ids, leaseFirst, err
}

// Settle settles the lease that starts at leaseFirst as a batch's settle
// does: acked rows deleted, failed ones released for retryIn, rejected ones
// for the longest backoff, the lease ended. Rows are named by their event
// ids, as Claim returns them; the settle names them by seq, looked up here
// (an id no longer in the outbox has none). It returns how many rows it
// deleted.
func Settle(ctx context.Context, r *Relay, leaseFirst int64, acked, failed []uuid.UUID, retryIn time.Duration, rejected []uuid.UUID) int64 {
	return r.markPublished(ctx, leaseFirst, seqsOf(r, acked), seqsOf(r, failed), retryIn, seqsOf(r, rejected))
}

// seqsOf looks the rows' seqs up outside any role (a cost tracer counts
// the lookup as the pool's "other" work, not the settle's).
func seqsOf(r *Relay, ids []uuid.UUID) []int64 {
	rows, err := r.pool.Query(context.Background(), "SELECT seq FROM outbox WHERE id = ANY ($1) ORDER BY seq", ids)
	if err != nil {
		panic(err)
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		panic(err)
	}
	return seqs
}

// EndLease ends the lease that starts at leaseFirst, as a stopping relay
// does with a batch it claimed and did not publish.
func EndLease(ctx context.Context, r *Relay, leaseFirst int64) { r.endLease(ctx, leaseFirst) }
