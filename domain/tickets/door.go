package tickets

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"boxoffice/domain/purchase"
	"boxoffice/platform/db"
	"boxoffice/platform/sliceutil"
	"boxoffice/sqlcgen"
)

// MaxBatch is the most scans one CheckIn call takes.
const MaxBatch = 1000

// MaxClockSkew is how far a scan's time may stray outside the times a
// scan can have happened: before the ticket was issued, or after now.
// An offline scanner stamps scans with its own clock, which drifts and is
// set by hand; the issuer stamps tickets with the worker's. Five minutes
// forgives a scanner that is minutes off (refusing its scan would leave a
// ticket that got in unrecorded, free to get in again) while a scan of
// year 1 cannot win the first-scan race against every honest scan, and
// one of year 9999 cannot leave the gate's last scan in the future.
const MaxClockSkew = 5 * time.Minute

// Scan is one scan of a ticket's QR payload at a gate.
type Scan struct {
	Payload string
	Gate    string
	// ScannedAt is when the scanner saw the ticket: now for a scanner that
	// is online, its own clock for an offline scanner's upload.
	ScannedAt time.Time
}

// Outcome is what the door made of a scan.
type Outcome string

// The outcomes of a scan.
const (
	// Accepted: the first check-in of a live ticket of the event.
	Accepted Outcome = "accepted"
	// Duplicate: the ticket was already checked in; Winner is that
	// check-in.
	Duplicate Outcome = "duplicate"
	// Revoked: a refund revoked the ticket; it admits nobody.
	Revoked Outcome = "revoked"
	// Invalid: the payload is not a ticket signed with the signing key, or
	// not one of this event's (by the ticket's order, whatever event the
	// payload names).
	Invalid Outcome = "invalid"
	// ScannedAtOutOfRange: the scan's time is more than MaxClockSkew
	// before the ticket was issued or after now; nothing was recorded.
	ScannedAtOutOfRange Outcome = "scanned-at-out-of-range"
)

// CheckIn is a ticket's recorded entry.
type CheckIn struct {
	TicketID   uuid.UUID
	Gate       string
	ScannedAt  time.Time
	RecordedAt time.Time
}

// Result is the door's answer to one scan.
type Result struct {
	Outcome Outcome
	// TicketID is the scanned ticket (zero for Invalid payloads that do
	// not verify).
	TicketID uuid.UUID
	// Winner is the ticket's check-in: this scan's when Accepted, the
	// first one's when Duplicate.
	Winner *CheckIn
}

// GateCount is how many tickets came in through one gate.
type GateCount struct {
	Gate          string
	CheckedIn     int
	LastScannedAt time.Time
}

// Door checks tickets in: it verifies each payload's signature offline
// (Verify); refuses revoked tickets, tickets of other events (by the
// ticket's row in the database, whose event is its order's, not by the
// event the payload names) and scans timed outside the ticket's issue to
// now (MaxClockSkew either way); and records the first check-in of each
// ticket under the check_ins primary key, so the first scan wins however
// many scanners race and a screenshot shared with a friend gets in once.
type Door struct {
	pool *pgxpool.Pool
	key  ed25519.PublicKey
}

// NewDoor returns the door of pool's events, verifying payloads with key
// (Signer.PublicKey).
func NewDoor(pool *pgxpool.Pool, key ed25519.PublicKey) *Door {
	return &Door{pool: pool, key: key}
}

// CheckIn takes up to MaxBatch scans (their times are truncated to
// microseconds, the database's precision) of the event organizerID organizes
// (else purchase.ErrEventNotFound) and answers each, in order: one
// statement records every first check-in (in scan-time order, so within
// a batch the earliest scan of a ticket wins) of a live ticket whose
// order is the event's, scanned from MaxClockSkew before its issue to
// MaxClockSkew after now; one reads what the rest ran into.
func (d *Door) CheckIn(ctx context.Context, organizerID, eventID uuid.UUID, scans []Scan) ([]Result, error) {
	if len(scans) > MaxBatch {
		return nil, fmt.Errorf("check in: %d scans, at most %d", len(scans), MaxBatch)
	}
	if _, err := purchase.OrganizedEvent(ctx, d.pool, organizerID, eventID); err != nil {
		return nil, err
	}
	results := make([]Result, len(scans))
	var ids []uuid.UUID
	var gates []string
	var times []time.Time
	for i := range scans {
		// The database keeps microseconds: a scan is compared with its
		// recorded check-in at that precision.
		scans[i].ScannedAt = scans[i].ScannedAt.Truncate(time.Microsecond)
		s := scans[i]
		t, err := Verify(d.key, s.Payload)
		if err != nil || t.EventID != eventID {
			results[i] = Result{Outcome: Invalid}
			continue
		}
		results[i].TicketID = t.ID
		ids, gates, times = append(ids, t.ID), append(gates, s.Gate), append(times, s.ScannedAt)
	}
	if len(ids) == 0 {
		return results, nil
	}
	latest := time.Now().Add(MaxClockSkew)
	q, tx := sqlcgen.New(), db.Interpreting(d.pool)
	recorded, err := q.CheckInRecord(ctx, tx, sqlcgen.CheckInRecordParams{
		TicketIds: ids, Gates: gates, ScannedAts: times, EventID: eventID,
		ClockSkew: MaxClockSkew, Latest: latest,
	})
	if err != nil {
		return nil, fmt.Errorf("record check-ins: %w", err)
	}
	state, err := q.CheckInState(ctx, tx, sqlcgen.CheckInStateParams{TicketIds: ids, EventID: eventID})
	if err != nil {
		return nil, fmt.Errorf("read check-ins: %w", err)
	}
	fresh := make(map[uuid.UUID]bool, len(recorded))
	for _, id := range recorded {
		fresh[id] = true
	}
	known := make(map[uuid.UUID]sqlcgen.CheckInStateRow, len(state))
	for _, s := range state {
		known[s.ID] = s
	}
	for i := range results {
		r := &results[i]
		if r.TicketID == uuid.Nil {
			continue
		}
		s, ok := known[r.TicketID]
		at := scans[i].ScannedAt
		switch {
		case !ok:
			// Signed for the event, but no such ticket, or a ticket
			// whose order is another event's.
			r.Outcome = Invalid
		case at.Add(MaxClockSkew).Before(s.IssuedAt) || at.After(latest):
			// CheckInRecord left it out by the same bounds.
			r.Outcome = ScannedAtOutOfRange
			continue
		case fresh[s.ID] && s.ScannedAt != nil && *s.Gate == scans[i].Gate && s.ScannedAt.Equal(scans[i].ScannedAt):
			// Recorded now: this is the batch's first scan of the ticket
			// (the one with the recorded gate and time); the others of
			// the batch are duplicates of it.
			r.Outcome = Accepted
			delete(fresh, s.ID)
		case s.RevokedAt != nil:
			r.Outcome = Revoked
		case s.ScannedAt != nil:
			r.Outcome = Duplicate
		default:
			// CheckInRecord either recorded the live ticket or ran into
			// a committed check-in of it.
			return nil, fmt.Errorf("check in ticket %s: neither recorded nor found", s.ID)
		}
		if s.ScannedAt != nil && r.Outcome != Revoked {
			r.Winner = &CheckIn{TicketID: s.ID, Gate: *s.Gate, ScannedAt: s.ScannedAt.UTC(), RecordedAt: s.RecordedAt.UTC()}
		}
	}
	return results, nil
}

// Counts returns how many tickets of the event organizerID organizes came
// in through each gate (else purchase.ErrEventNotFound).
func (d *Door) Counts(ctx context.Context, organizerID, eventID uuid.UUID) ([]GateCount, error) {
	if _, err := purchase.OrganizedEvent(ctx, d.pool, organizerID, eventID); err != nil {
		return nil, err
	}
	rows, err := sqlcgen.New().CheckInCountsByGate(ctx, db.Interpreting(d.pool), eventID)
	if err != nil {
		return nil, fmt.Errorf("count check-ins: %w", err)
	}
	return sliceutil.Map(rows, func(r sqlcgen.CheckInCountsByGateRow) GateCount {
		return GateCount{Gate: r.Gate, CheckedIn: int(r.CheckedIn), LastScannedAt: r.LastScannedAt.UTC()}
	}), nil
}
