// Package failover is the regional failover of docs/failover.md as steps an
// operator runs in order, each safe to run twice:
//
//  1. Stop, on the old primary's database while it still answers: pause
//     every onsale of the cell and fence the database at the new epoch.
//  2. Measure, on the standby: the recovery point (replica replay lag,
//     stream copy lag, the outbox backlog), printed.
//  3. Promote, on the standby: measure and store the recovery point,
//     promote the database (pg_promote) and the stream copies
//     (bus.PromoteStandby), fence at the new epoch and keep every onsale
//     paused until the standby's roles are up and `boxoffice smoke` passes.
//  4. Resume: reopen the onsales the failover paused.
//
// The steps act as an operator session, which declares no region epoch and
// is never fenced itself.
package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"boxoffice/platform/bus"
	"boxoffice/sqlcgen"
)

// Fenced is the outcome of raising a database's region epoch.
type Fenced struct {
	// Before and After are the epoch in force before and after.
	Before, After int64
}

// Fence raises the epoch of pool's database to epoch: the one writer of
// region_epoch, for boxoffice fence, Stop and Promote. It returns an error
// when the database is already past it: epochs are never lowered, and a
// failover to an epoch already superseded is a mistake.
func Fence(ctx context.Context, pool *pgxpool.Pool, epoch int64) (Fenced, error) {
	q := sqlcgen.New()
	before, err := q.RegionEpochGet(ctx, pool)
	if err != nil {
		return Fenced{}, fmt.Errorf("read region epoch: %w", err)
	}
	after, err := q.RegionEpochRaise(ctx, pool, epoch)
	if err != nil {
		return Fenced{}, fmt.Errorf("raise region epoch: %w", err)
	}
	if after > epoch {
		return Fenced{Before: before, After: after}, fmt.Errorf("the region epoch is %d; it is never lowered to %d", after, epoch)
	}
	return Fenced{Before: before, After: after}, nil
}

// StopResult is what Stop did.
type StopResult struct {
	// Paused lists the onsales this run paused (none on a second run).
	Paused []uuid.UUID
	Fenced Fenced
}

// Stop stops the cell whose database pool is: every onsale not paused is
// paused (recorded under epoch, so Resume reopens exactly those), then the
// database is fenced at epoch. Once it returns nil no process on an older
// epoch writes to this database again, and no buyer is admitted; a second
// run changes nothing. epoch must be the new epoch, the old one plus one.
func Stop(ctx context.Context, pool *pgxpool.Pool, epoch int64) (StopResult, error) {
	if epoch < 2 {
		return StopResult{}, errors.New("stop: the new epoch must be at least 2")
	}
	paused, err := sqlcgen.New().FailoverPauseOnsales(ctx, pool, epoch)
	if err != nil {
		return StopResult{}, fmt.Errorf("pause onsales: %w", err)
	}
	f, err := Fence(ctx, pool, epoch)
	if err != nil {
		return StopResult{Paused: paused}, err
	}
	return StopResult{Paused: paused, Fenced: f}, nil
}

// Resume reopens the onsales the failover to epoch paused and that are
// still marked paused by it; it returns those it reopened (none on a
// second run). An onsale its organizer had paused before the failover was
// never recorded, and stays paused.
func Resume(ctx context.Context, pool *pgxpool.Pool, epoch int64) ([]uuid.UUID, error) {
	ids, err := sqlcgen.New().FailoverResumeOnsales(ctx, pool, epoch)
	if err != nil {
		return nil, fmt.Errorf("resume onsales: %w", err)
	}
	return ids, nil
}

// Sources are where the recovery point is read. The primary's are nil
// when its region does not answer.
type Sources struct {
	// Standby is the standby's database, an operator session.
	Standby *pgxpool.Pool
	// StandbyJS is the standby's JetStream, holding the stream copies.
	StandbyJS jetstream.JetStream
	// Primary and PrimaryJS are the old primary's, or nil.
	Primary   *pgxpool.Pool
	PrimaryJS jetstream.JetStream
	// Namespace is the cell's share of the bus.
	Namespace bus.Namespace
}

// RecoveryPoint is what the standby held of the primary at one moment:
// what a failover then keeps, and what it loses.
type RecoveryPoint struct {
	MeasuredAt time.Time `json:"measured_at"`

	// InRecovery is true while the standby database is not promoted.
	InRecovery bool `json:"in_recovery"`
	// ReceiveLSN and ReplayLSN are the WAL the standby has received and
	// replayed; what it has replayed is what a promotion keeps.
	ReceiveLSN string `json:"receive_lsn"`
	ReplayLSN  string `json:"replay_lsn"`
	// LastReplayedCommitAt is the primary's commit time of the last
	// transaction the standby replayed.
	LastReplayedCommitAt *time.Time `json:"last_replayed_commit_at"`
	// PrimaryLSN and ReplayLagBytes: the primary's WAL position and how
	// far behind it ReplayLSN is; nil when the primary does not answer.
	PrimaryLSN     *string `json:"primary_lsn"`
	ReplayLagBytes *int64  `json:"replay_lag_bytes"`

	// Streams are the standby's copies of the cell's two streams.
	Streams []bus.StreamCopy `json:"streams"`
	// PrimaryLastSeq is the last sequence of the primary's event stream;
	// nil when the primary's bus does not answer.
	PrimaryLastSeq *uint64 `json:"primary_last_seq"`
	// StreamLag is how many events of the primary's stream the copy
	// lacks: exact when the primary answered, else the mirror's last
	// report (a lower bound).
	StreamLag uint64 `json:"stream_lag"`

	// OutboxUnpublished counts outbox rows committed but not yet on the
	// bus, as the standby has them: its relay publishes them.
	OutboxUnpublished int64      `json:"outbox_unpublished"`
	OutboxOldestAt    *time.Time `json:"outbox_oldest_at"`
}

// Measure reads the recovery point from src. It fails only when the
// standby does not answer; a primary that does not answer leaves its
// fields nil.
func Measure(ctx context.Context, src Sources) (RecoveryPoint, error) {
	q := sqlcgen.New()
	rp := RecoveryPoint{MeasuredAt: time.Now().UTC()}
	st, err := q.FailoverReplicaState(ctx, src.Standby)
	if err != nil {
		return rp, fmt.Errorf("read the standby's replication state: %w", err)
	}
	rp.InRecovery, rp.ReceiveLSN, rp.ReplayLSN = st.InRecovery, st.ReceiveLsn, st.ReplayLsn
	rp.LastReplayedCommitAt = fromUnix(st.LastReplayedCommitUnix)
	if src.Primary != nil && rp.ReplayLSN != "" {
		if pl, err := q.FailoverPrimaryLag(ctx, src.Primary, rp.ReplayLSN); err == nil {
			rp.PrimaryLSN, rp.ReplayLagBytes = &pl.CurrentLsn, &pl.LagBytes
		}
	}
	backlog, err := q.FailoverOutboxBacklog(ctx, src.Standby)
	if err != nil {
		return rp, fmt.Errorf("read the standby's outbox: %w", err)
	}
	rp.OutboxUnpublished, rp.OutboxOldestAt = backlog.Unpublished, fromUnix(backlog.OldestUnix)

	rp.Streams, err = bus.StandbyCopies(ctx, src.StandbyJS, src.Namespace)
	if err != nil {
		return rp, err
	}
	rp.StreamLag = rp.Streams[0].Lag
	if src.PrimaryJS != nil {
		if s, err := src.PrimaryJS.Stream(ctx, src.Namespace.Stream()); err == nil {
			last := s.CachedInfo().State.LastSeq
			rp.PrimaryLastSeq = &last
			rp.StreamLag = 0
			if last > rp.Streams[0].LastSeq {
				rp.StreamLag = last - rp.Streams[0].LastSeq
			}
		}
	}
	return rp, nil
}

// fromUnix converts Unix seconds, 0 for none, to a time.
func fromUnix(sec float64) *time.Time {
	if sec == 0 {
		return nil
	}
	t := time.UnixMicro(int64(sec * 1e6)).UTC()
	return &t
}

// Write prints the recovery point for the operator.
func (rp RecoveryPoint) Write(w io.Writer) error {
	pf := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	pf("recovery point at %s\n", rp.MeasuredAt.Format(time.RFC3339Nano))
	pf("  database: in recovery %v, received %s, replayed %s\n",
		rp.InRecovery, orDash(rp.ReceiveLSN), orDash(rp.ReplayLSN))
	if rp.LastReplayedCommitAt != nil {
		pf("  database: last replayed commit at %s (%s before this measurement)\n",
			rp.LastReplayedCommitAt.UTC().Format(time.RFC3339Nano), rp.MeasuredAt.Sub(*rp.LastReplayedCommitAt).Round(time.Millisecond))
	}
	if rp.ReplayLagBytes != nil {
		pf("  database: replay lag %d bytes behind the primary's %s\n", *rp.ReplayLagBytes, *rp.PrimaryLSN)
	} else {
		pf("  database: the primary did not answer; whatever it committed after the replayed position is lost\n")
	}
	for _, s := range rp.Streams {
		pf("  stream %s: last seq %d, mirror %v, mirror lag %d, heard from the primary %s ago\n",
			s.Stream, s.LastSeq, s.Mirror, s.Lag, s.Active.Round(time.Millisecond))
	}
	if rp.PrimaryLastSeq != nil {
		pf("  stream: the primary's last seq %d: copy lag %d events\n", *rp.PrimaryLastSeq, rp.StreamLag)
	} else {
		pf("  stream: the primary's bus did not answer: copy lag at least %d events (the mirror's last report)\n", rp.StreamLag)
	}
	if rp.OutboxOldestAt != nil {
		pf("  outbox: %d rows not yet on the bus, the oldest from %s; the standby's relay publishes them\n",
			rp.OutboxUnpublished, rp.OutboxOldestAt.UTC().Format(time.RFC3339Nano))
	} else {
		pf("  outbox: empty\n")
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
