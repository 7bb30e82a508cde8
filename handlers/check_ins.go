package handlers

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"boxoffice/domain/tickets"
	"boxoffice/platform/auth"
)

// Problem types of the door.
const (
	// TypeAlreadyCheckedIn: the ticket was used already; the problem says
	// when and at which gate.
	TypeAlreadyCheckedIn = "/problems/already-checked-in"
	// TypeTicketRevoked: a refund revoked the ticket; it admits nobody.
	TypeTicketRevoked = "/problems/ticket-revoked"
	// TypeTicketInvalid: the payload is not a ticket of this event signed
	// with the signing key: it does not verify, or the ticket's order is
	// another event's (whatever event the payload names).
	TypeTicketInvalid = "/problems/ticket-invalid"
	// TypeScannedAtOutOfRange: the scan's time is more than
	// tickets.MaxClockSkew before the ticket was issued or after the
	// server's now; nothing was recorded.
	TypeScannedAtOutOfRange = "/problems/scanned-at-out-of-range"
)

// ScanBody is one scan of a ticket's QR code.
type ScanBody struct {
	QRPayload string `json:"qrPayload" minLength:"1" maxLength:"512" example:"BX1.…" doc:"What the ticket's QR code holds."`
	Gate      string `json:"gate" minLength:"1" maxLength:"100" trim:"true" pattern:"\\S" patternDescription:"text that is not blank" example:"north-1" doc:"Where the ticket was scanned."`
}

// CheckInInput is one scan at a gate that is online.
type CheckInInput struct {
	EventID string `path:"eventId" format:"uuid" doc:"Event id (UUID)."`
	Body    ScanBody
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
	EventID string `path:"eventId" format:"uuid" doc:"Event id (UUID)."`
	Body    struct {
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

func (h *Handlers) registerCheckIns(api huma.API) {
	const who = " For the event's organizer and their scanners (role scanner, minted for the organizer); for " +
		"anyone else the event does not exist (404)."
	// The clock skew the door allows a scan's time, in words.
	skew := fmt.Sprintf("%d minutes", tickets.MaxClockSkew/time.Minute)
	register(api, secured(huma.Operation{
		OperationID: "check-in", Method: http.MethodPost, Path: "/v1/events/{eventId}/check-ins",
		Summary: "Check a ticket in at the door", Tags: []string{"Check-in"}, DefaultStatus: http.StatusCreated,
		MaxBodyBytes: 4 << 10,
		Description: "Verifies the QR payload's signature, refuses a revoked ticket (409 `" + TypeTicketRevoked + "`) " +
			"and records the ticket's first check-in. The first scan of a ticket wins, however many scanners race: " +
			"a second scan answers 409 `" + TypeAlreadyCheckedIn + "` with when and at which gate the ticket was " +
			"first used. A payload that is not a signed ticket of this event (by the ticket's order, whatever event the " +
			"payload names) answers 422 `" + TypeTicketInvalid + "`; a ticket issued more than " + skew + " after the " +
			"server's now (a clock is off) 422 `" + TypeScannedAtOutOfRange + "`. Nothing is recorded for a refused scan. " +
			"Idempotent by nature, so it takes no Idempotency-Key: a scan retried after its answer was lost records nothing " +
			"twice and answers 409 `" + TypeAlreadyCheckedIn + "` whose `checkIn` is the recorded one (its ticket, gate and time), " +
			"which tells a scanner that retried at its own gate that the ticket is in." + who,
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusServiceUnavailable},
	}, auth.RoleOrganizer, auth.RoleScanner), h.checkIn)
	register(api, secured(huma.Operation{
		OperationID: "check-in-batch", Method: http.MethodPost, Path: "/v1/events/{eventId}/check-ins/batch",
		Summary: "Upload an offline scanner's scans", Tags: []string{"Check-in"},
		MaxBodyBytes: 1 << 20,
		Description: "Up to 1,000 scans with the scanner's own scan times, answered one by one and in order: " +
			"accepted, duplicate (with the winning check-in), revoked, invalid (not a signed ticket of this event, " +
			"by the ticket's order) or scanned-at-out-of-range (scannedAt more than " + skew + " before the " +
			"ticket was issued or after the server's now, so a backdated scan cannot win and no check-in lies in " +
			"the future). Only accepted scans are recorded; the rest of the batch proceeds whatever one scan's outcome. " +
			"Within a batch the earliest scan of a ticket wins; a ticket already in from before is a duplicate, " +
			"also when the same batch is uploaded again: the upload is idempotent by nature (it takes no Idempotency-Key), " +
			"and a re-upload's duplicates carry the check-ins its first upload recorded, at its own gates and scan times." + who,
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusServiceUnavailable},
	}, auth.RoleOrganizer, auth.RoleScanner), h.checkInBatch)
	register(api, secured(huma.Operation{
		OperationID: "count-check-ins", Method: http.MethodGet, Path: "/v1/events/{eventId}/check-ins",
		Summary: "Count the event's check-ins per gate", Tags: []string{"Check-in"},
		Description: "How many tickets came in through each gate, and when the last was scanned." + who,
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer, auth.RoleScanner), h.countCheckIns)
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
