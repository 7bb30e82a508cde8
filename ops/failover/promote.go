package failover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"

	"boxoffice/platform/bus"
	"boxoffice/sqlcgen"
)

// PromoteParams are Promote's input.
type PromoteParams struct {
	Sources
	// Epoch is the new region epoch, the old primary's plus one.
	Epoch int64
	// Streams is the cell's stream configuration (the roles'), which the
	// promoted streams take.
	Streams bus.Config
	// Wait bounds the database's promotion. Defaults to 60s.
	Wait time.Duration
}

// PromoteResult is what Promote did.
type PromoteResult struct {
	// Point is the recovery point stored for this epoch: the one this run
	// measured, or an earlier run's.
	Point RecoveryPoint
	// Report is Point as stored (the first run's print).
	Report string
	// DatabasePromoted and StreamsPromoted say what this run promoted
	// (nothing on a second run).
	DatabasePromoted bool
	StreamsPromoted  []string
	Fenced           Fenced
	// Paused lists the onsales this run paused.
	Paused []uuid.UUID
}

// Promote makes the standby the cell's primary at p.Epoch: it measures the
// recovery point, promotes the database (pg_promote) unless it already
// is, fences it at p.Epoch, pauses every open onsale (recorded for
// Resume), promotes the stream copies (bus.PromoteStandby) and stores the
// recovery point (the first run's is kept). Each part is a no-op when done
// already, so Promote is safe to run twice, and to run again after a run
// that failed halfway. When it returns nil the standby's roles, started
// with BOXOFFICE_REGION_EPOCH=p.Epoch, can write and publish.
//
// The caller must have made sure the old primary is down or fenced (Stop):
// Promote cannot tell a dead primary from an unreachable one.
func Promote(ctx context.Context, p PromoteParams) (PromoteResult, error) {
	if p.Epoch < 2 {
		return PromoteResult{}, errors.New("promote: the new epoch must be at least 2")
	}
	if p.Wait <= 0 {
		p.Wait = time.Minute
	}
	p.Streams.Namespace = p.Namespace
	var res PromoteResult
	rp, err := Measure(ctx, p.Sources)
	if err != nil {
		return res, err
	}
	res.Point = rp
	q := sqlcgen.New()
	if rp.InRecovery {
		ok, err := q.FailoverPromote(ctx, p.Standby, int32(p.Wait/time.Second))
		if err != nil {
			return res, fmt.Errorf("promote the standby database: %w", err)
		}
		if !ok {
			return res, fmt.Errorf("promote the standby database: not promoted within %s", p.Wait)
		}
		res.DatabasePromoted = true
	}
	if res.Fenced, err = Fence(ctx, p.Standby, p.Epoch); err != nil {
		return res, err
	}
	if res.Paused, err = q.FailoverPauseOnsales(ctx, p.Standby, p.Epoch); err != nil {
		return res, fmt.Errorf("pause onsales: %w", err)
	}
	if res.StreamsPromoted, err = bus.PromoteStandby(ctx, p.StandbyJS, p.Streams); err != nil {
		return res, err
	}
	var report bytes.Buffer
	_ = rp.Write(&report)
	params := sqlcgen.FailoverRecoveryPointInsertParams{
		Epoch: p.Epoch, LastReplayedCommitAt: rp.LastReplayedCommitAt, ReplayLagBytes: rp.ReplayLagBytes,
		StreamLagMessages: int64(rp.StreamLag), StreamLastSeq: int64(rp.Streams[0].LastSeq),
		OutboxUnpublished: rp.OutboxUnpublished, OutboxOldestAt: rp.OutboxOldestAt, Report: report.String(),
	}
	if rp.ReplayLSN != "" {
		params.ReplayLsn = &rp.ReplayLSN
	}
	if rp.PrimaryLastSeq != nil {
		v := int64(*rp.PrimaryLastSeq)
		params.PrimaryStreamLastSeq = &v
	}
	stored, err := q.FailoverRecoveryPointInsert(ctx, p.Standby, params)
	if err != nil {
		return res, fmt.Errorf("store the recovery point: %w", err)
	}
	res.Report = stored.Report
	return res, nil
}

// Write prints what Promote did.
func (r PromoteResult) Write(w io.Writer) error {
	fmt.Fprint(w, r.Report)
	if r.DatabasePromoted {
		fmt.Fprintln(w, "database promoted: it accepts writes")
	} else {
		fmt.Fprintln(w, "database already promoted")
	}
	fmt.Fprintf(w, "region epoch %d (was %d): processes on an older epoch can no longer write here\n", r.Fenced.After, r.Fenced.Before)
	fmt.Fprintf(w, "onsales paused by this run: %d (resume with `boxoffice failover resume` once smoke passes)\n", len(r.Paused))
	if len(r.StreamsPromoted) > 0 {
		fmt.Fprintf(w, "streams promoted: %v\n", r.StreamsPromoted)
	} else {
		fmt.Fprintln(w, "streams already promoted")
	}
	return nil
}
