package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/google/uuid"

	"boxoffice/domain/tickets"
)

// ScanBody is one scan of a ticket's QR code.
type ScanBody struct {
	QRPayload string `json:"qrPayload" minLength:"1" maxLength:"512" example:"BX1.…" doc:"What the ticket's QR code holds."`
	Gate      string `json:"gate" minLength:"1" maxLength:"100" trim:"true" pattern:"\\S" patternDescription:"text that is not blank" example:"north-1" doc:"Where the ticket was scanned."`
}

// CheckInInput is one scan at a gate that is online.
type CheckInInput struct {
	EventPathInput
	Body ScanBody
}

// CheckInBody is a ticket's recorded entry.
type CheckInBody struct {
	TicketID   uuid.UUID `json:"ticketId"`
	Gate       string    `json:"gate"`
	ScannedAt  time.Time `json:"scannedAt"`
	RecordedAt time.Time `json:"recordedAt"`
}

// CheckInOutput is the accepted check-in.
type CheckInOutput struct {
	Body CheckInBody
}

// OfflineScanBody is one scan an offline scanner made.
type OfflineScanBody struct {
	ScanBody
	ScannedAt time.Time `json:"scannedAt" doc:"When the scanner saw the ticket, by its own clock: from the ticket's issue to the server's now, give or take the clock skew the operation allows; else the scan's outcome is scanned-at-out-of-range."`
}

// CheckInBatchInput is an offline scanner's upload.
type CheckInBatchInput struct {
	EventPathInput
	Body struct {
		Scans []OfflineScanBody `json:"scans" minItems:"1" maxItems:"1000"`
	}
}

// CheckInResultBody is what the door made of one scan of a batch.
type CheckInResultBody struct {
	Outcome  string       `json:"outcome" enum:"accepted,duplicate,revoked,invalid,scanned-at-out-of-range" doc:"What the door made of the scan: accepted (this scan is the ticket's check-in), duplicate (the ticket was in already; checkIn says when and where), revoked (a refund revoked the ticket), invalid (not a signed ticket of this event) or scanned-at-out-of-range (scannedAt is before the ticket was issued or after the server's now, by more than the clock skew the operation allows). Only an accepted scan is recorded."`
	TicketID *uuid.UUID   `json:"ticketId,omitempty" doc:"Absent for a payload that does not verify."`
	CheckIn  *CheckInBody `json:"checkIn,omitempty" doc:"The ticket's check-in: this scan's when accepted, the first scan's when a duplicate."`
}

// CheckInBatchOutput answers each scan of a batch, in order.
type CheckInBatchOutput struct {
	Body struct {
		Results []CheckInResultBody `json:"results"`
	}
}

// GateCountBody is how many tickets came in through a gate.
type GateCountBody struct {
	Gate          string    `json:"gate"`
	CheckedIn     int       `json:"checkedIn"`
	LastScannedAt time.Time `json:"lastScannedAt"`
}

// CheckInCountsOutput counts the event's check-ins per gate.
type CheckInCountsOutput struct {
	Body struct {
		Total int             `json:"total"`
		Gates []GateCountBody `json:"gates"`
	}
}

// door returns the door of the event's cell, or the problem.
func (h *Handlers) door(ctx context.Context, raw string) (*tickets.Door, uuid.UUID, error) {
	c, eventID, err := h.eventPath(ctx, raw)
	if err != nil {
		return nil, eventID, err
	}
	if c.Door == nil {
		return nil, eventID, problem(http.StatusServiceUnavailable, TypeUnavailable,
			"Tickets cannot be verified here: this deployment has no ticket signing key.")
	}
	return c.Door, eventID, nil
}

func checkInBody(c *tickets.CheckIn) *CheckInBody {
	if c == nil {
		return nil
	}
	return &CheckInBody{TicketID: c.TicketID, Gate: c.Gate, ScannedAt: c.ScannedAt.UTC(), RecordedAt: c.RecordedAt.UTC()}
}

func (h *Handlers) checkIn(ctx context.Context, in *CheckInInput) (*CheckInOutput, error) {
	door, eventID, err := h.door(ctx, in.EventID)
	if err != nil {
		return nil, err
	}
	rs, err := door.CheckIn(ctx, identity(ctx).OrganizerID, eventID, []tickets.Scan{{
		Payload: in.Body.QRPayload, Gate: in.Body.Gate, ScannedAt: time.Now(),
	}})
	if err != nil {
		return nil, h.problemFor(ctx, err, "check in", "No such event.", "event_id", eventID)
	}
	r := rs[0]
	switch r.Outcome {
	case tickets.Accepted:
		return &CheckInOutput{Body: *checkInBody(r.Winner)}, nil
	case tickets.Duplicate:
		p := problem(http.StatusConflict, TypeAlreadyCheckedIn,
			"This ticket was already used at gate "+r.Winner.Gate+" at "+r.Winner.ScannedAt.UTC().Format(time.RFC3339)+".")
		p.CheckIn = checkInBody(r.Winner)
		return nil, p
	case tickets.Revoked:
		return nil, problem(http.StatusConflict, TypeTicketRevoked, "This ticket was revoked by a refund; it admits nobody.")
	case tickets.ScannedAtOutOfRange:
		return nil, problem(http.StatusUnprocessableEntity, TypeScannedAtOutOfRange,
			"This ticket was issued after the server's time of the scan; nothing was recorded.")
	default:
		return nil, problem(http.StatusUnprocessableEntity, TypeTicketInvalid, "This is not a valid ticket for this event.")
	}
}

func (h *Handlers) checkInBatch(ctx context.Context, in *CheckInBatchInput) (*CheckInBatchOutput, error) {
	door, eventID, err := h.door(ctx, in.EventID)
	if err != nil {
		return nil, err
	}
	scans := make([]tickets.Scan, len(in.Body.Scans))
	for i, s := range in.Body.Scans {
		scans[i] = tickets.Scan{Payload: s.QRPayload, Gate: s.Gate, ScannedAt: s.ScannedAt}
	}
	rs, err := door.CheckIn(ctx, identity(ctx).OrganizerID, eventID, scans)
	if err != nil {
		return nil, h.problemFor(ctx, err, "check in batch", "No such event.", "event_id", eventID)
	}
	out := &CheckInBatchOutput{}
	out.Body.Results = make([]CheckInResultBody, len(rs))
	for i, r := range rs {
		res := CheckInResultBody{Outcome: string(r.Outcome), CheckIn: checkInBody(r.Winner)}
		if r.TicketID != uuid.Nil {
			id := r.TicketID
			res.TicketID = &id
		}
		out.Body.Results[i] = res
	}
	return out, nil
}

func (h *Handlers) countCheckIns(ctx context.Context, in *EventPathInput) (*CheckInCountsOutput, error) {
	door, eventID, err := h.door(ctx, in.EventID)
	if err != nil {
		return nil, err
	}
	counts, err := door.Counts(ctx, identity(ctx).OrganizerID, eventID)
	if err != nil {
		return nil, h.problemFor(ctx, err, "count check-ins", "No such event.", "event_id", eventID)
	}
	out := &CheckInCountsOutput{}
	out.Body.Gates = make([]GateCountBody, len(counts))
	for i, c := range counts {
		out.Body.Gates[i] = GateCountBody{Gate: c.Gate, CheckedIn: c.CheckedIn, LastScannedAt: c.LastScannedAt}
		out.Body.Total += c.CheckedIn
	}
	return out, nil
}
