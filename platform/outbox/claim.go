package outbox

import (
	"context"
	"time"

	"github.com/google/uuid"

	"boxoffice/platform/db"
	"boxoffice/platform/sliceutil"
	"boxoffice/sqlcgen"
)

// The relay's side of the outbox: claiming rows under a lease, settling
// them once JetStream answered, and the backlog. Each is one statement,
// run on the pool outside any transaction (outbox_claim and outbox_settle,
// migrations/functions/, are their own transactions); this package is the
// one writer of the outbox and outbox_leases tables, and the relay asks
// it. Errors are the database's, for the caller to wrap.

// ClaimParams says which rows Claim may lease.
type ClaimParams struct {
	// RelayID names the relay the lease is for.
	RelayID string
	// MaxRows is the most rows one claim returns.
	MaxRows int32
	// Lease is how long the rows are the relay's alone.
	Lease time.Duration
	// HeadScan reads from the outbox's head instead of from Floor.
	HeadScan bool
	// Floor is the seq the fast path starts from: the head of the
	// relay's last head scan.
	Floor int64
}

// Claimed is an outbox row leased to a relay: what it publishes.
type Claimed struct {
	// ID is the event id, the message's Nats-Msg-Id.
	ID uuid.UUID
	// Seq is the row's place in the outbox (commit order).
	Seq int64
	// Subject is the event's subject in the default namespace.
	Subject string
	// Envelope is the message body, the event's JSON envelope.
	Envelope []byte
	// TraceParent is the W3C traceparent of the span that wrote the
	// event, "" when tracing was off.
	TraceParent string
}

// Claim leases up to p.MaxRows unpublished rows, oldest first, to
// p.RelayID for p.Lease (outbox_claim in migrations/functions/ says what
// it guarantees), and returns them in seq order.
func Claim(ctx context.Context, d db.DBTX, p ClaimParams) ([]Claimed, error) {
	rows, err := sqlcgen.New().OutboxClaim(ctx, d, sqlcgen.OutboxClaimParams(p))
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return sliceutil.Map(rows, func(r sqlcgen.OutboxClaimRow) Claimed { return Claimed(r) }), nil
}

// SettleParams is what a relay learned of one leased batch.
type SettleParams struct {
	// RelayID and LeaseFirst name the lease: its relay and its first seq.
	RelayID    string
	LeaseFirst int64
	// Acked are the rows JetStream stored, by their Claimed.Seq (the
	// outbox's key): they are deleted.
	Acked []int64
	// Failed rows (by seq) wait RetryAfter before they are claimed again.
	Failed     []int64
	RetryAfter time.Duration
	// Rejected rows (by seq) wait RejectAfter before they are claimed
	// again.
	Rejected    []int64
	RejectAfter time.Duration
}

// Settle deletes the acknowledged rows, makes failed and rejected rows
// wait, and ends the lease, in one statement (outbox_settle in
// migrations/functions/). It returns the commit-to-acknowledgement latency
// in seconds of each row it deleted: fewer than len(p.Acked) when another
// relay deleted some after this one's lease expired. A settle with no rows
// only ends the lease.
func Settle(ctx context.Context, d db.DBTX, p SettleParams) ([]float64, error) {
	return sqlcgen.New().OutboxSettle(ctx, d, sqlcgen.OutboxSettleParams(p))
}

// Stats is the outbox's backlog.
type Stats struct {
	// Backlog counts unpublished rows; it stops at 100,000.
	Backlog int64
	// OldestAgeSeconds is the age of the oldest row, by the database
	// clock.
	OldestAgeSeconds float64
}

// ReadStats reads the backlog, walking the outbox's seq index from its
// head rather than scanning the table.
func ReadStats(ctx context.Context, d db.DBTX) (Stats, error) {
	s, err := sqlcgen.New().OutboxStats(ctx, d)
	return Stats(s), err
}
