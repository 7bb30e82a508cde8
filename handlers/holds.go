package handlers

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"boxoffice/domain/cells"
	"boxoffice/domain/purchase"
	"boxoffice/domain/waitingroom"
	"boxoffice/platform/telemetry"
)

// CreateHoldInput asks to hold seats.
type CreateHoldInput struct {
	EventPathInput
	IdempotencyKey string `header:"Idempotency-Key" required:"true" minLength:"1" maxLength:"255" doc:"Retry with the same key to get the original order back, for 24 hours, even once the admission token has expired or been revoked; the same key with a different body is a 409 idempotency-conflict."`
	AdmissionToken string `header:"X-Admission-Token" required:"true" minLength:"1" maxLength:"4096" doc:"From the waiting room."`
	Body           struct {
		SeatIDs []uuid.UUID `json:"seatIds" minItems:"1" maxItems:"8" unique:"true" doc:"1 to 8 distinct seats of this event."`
	}
}

// HoldBody is the answer to a hold.
type HoldBody struct {
	OrderID   uuid.UUID `json:"orderId"`
	HoldID    uuid.UUID `json:"holdId"`
	Status    string    `json:"status" enum:"pending_payment,authorized,capture_pending,paid,ticketed,failed,canceled,refunding,refunded" doc:"The order's status: pending_payment when the hold is made; a retry with the same Idempotency-Key says what became of the order since."`
	ExpiresAt time.Time `json:"expiresAt" doc:"The seats are yours until then; pay before it."`
}

// CreateHoldOutput is the answer to a hold.
type CreateHoldOutput struct {
	Location        string `header:"Location"`
	RateLimitPolicy string `header:"RateLimit-Policy" doc:"The buyer's hold budget in this API process (IETF httpapi RateLimit draft): \"holds\";q=<burst>;w=<seconds to refill from empty>. Absent where holds are not limited."`
	RateLimit       string `header:"RateLimit" doc:"What is left of it after this request: \"holds\";r=<holds left now>;t=<seconds until full again>."`
	Body            HoldBody
}

// CreateBestAvailableHoldInput asks to hold the best available seats of a
// price category.
type CreateBestAvailableHoldInput struct {
	EventPathInput
	IdempotencyKey string `header:"Idempotency-Key" required:"true" minLength:"1" maxLength:"255" doc:"Retry with the same key to get the original order and its seats back, for 24 hours, even once the admission token has expired or been revoked; the same key with a different body (or a hold of named seats) is a 409 idempotency-conflict."`
	AdmissionToken string `header:"X-Admission-Token" required:"true" minLength:"1" maxLength:"4096" doc:"From the waiting room."`
	Body           struct {
		CategoryID   uuid.UUID `json:"categoryId" doc:"A price category of this event (the seat map's categories)."`
		Quantity     int       `json:"quantity" minimum:"1" maximum:"8" example:"2" doc:"How many seats: 1 to 8."`
		AdjacentOnly bool      `json:"adjacentOnly,omitempty" doc:"Only seats side by side in one row: when no such run is free, 409 not-enough-seats instead of the best seats apart."`
	}
}

// HeldSeatBody is a seat a best-available hold picked.
type HeldSeatBody struct {
	ID      uuid.UUID `json:"id"`
	Section string    `json:"section"`
	Label   string    `json:"label" example:"B-12"`
}

// BestAvailableHoldBody is the answer to a best-available hold: the hold
// and the seats it picked.
type BestAvailableHoldBody struct {
	HoldBody
	Seats []HeldSeatBody `json:"seats" doc:"The seats held, in seat map order."`
}

// CreateBestAvailableHoldOutput is the answer to a best-available hold.
type CreateBestAvailableHoldOutput struct {
	Location        string `header:"Location"`
	RateLimitPolicy string `header:"RateLimit-Policy" doc:"As for create-hold: one budget for both kinds of hold."`
	RateLimit       string `header:"RateLimit" doc:"As for create-hold."`
	Body            BestAvailableHoldBody
}

// holdLimit is the RateLimit-Policy and RateLimit headers of a hold's
// answer: what is left of the buyer's budget.
type holdLimit struct{ policy, state string }

// holdBudget takes one of the buyer's holds from their budget, the same
// for both kinds of hold, and returns the headers of what is left, or the
// 429 with them when nothing is. Every hold the buyer asks for counts, a
// retry with an Idempotency-Key that already succeeded too: the limit is
// decided before anything is verified or read, so a refused hold costs no
// database work at all.
func (h *Handlers) holdBudget(user uuid.UUID) (holdLimit, error) {
	left, wait, ok := h.limits.holds.allowBudget(user, time.Now())
	policy, state := left.headers("holds")
	if !ok {
		return holdLimit{}, huma.ErrorWithHeaders(
			rateLimited("You are asking for holds too fast; nothing was held. Retry after Retry-After, with the same Idempotency-Key.", wait),
			http.Header{"RateLimit-Policy": {policy}, "RateLimit": {state}})
	}
	return holdLimit{policy, state}, nil
}

func (h *Handlers) createHold(ctx context.Context, in *CreateHoldInput) (*CreateHoldOutput, error) {
	eventID, err := parseUUID(in.EventID, "path.eventId")
	if err != nil {
		return nil, err
	}
	if len(in.Body.SeatIDs) == 0 { // null passes the schema's minItems
		p := problem(http.StatusUnprocessableEntity, TypeValidation, "Validation failed.")
		p.Errors = []*huma.ErrorDetail{{Location: "body.seatIds", Message: "expected 1 to 8 seats"}}
		return nil, p
	}
	hold, limit, err := h.hold(ctx, in.AdmissionToken, purchase.HoldParams{
		UserID: identity(ctx).UserID, EventID: eventID, SeatIDs: in.Body.SeatIDs, IdempotencyKey: in.IdempotencyKey,
	})
	if err != nil {
		return nil, err
	}
	out := holdOutput(hold)
	out.RateLimitPolicy, out.RateLimit = limit.policy, limit.state
	return out, nil
}

func (h *Handlers) createBestAvailableHold(ctx context.Context, in *CreateBestAvailableHoldInput) (*CreateBestAvailableHoldOutput, error) {
	eventID, err := parseUUID(in.EventID, "path.eventId")
	if err != nil {
		return nil, err
	}
	hold, limit, err := h.hold(ctx, in.AdmissionToken, purchase.HoldParams{
		UserID: identity(ctx).UserID, EventID: eventID, IdempotencyKey: in.IdempotencyKey,
		BestAvailable: &purchase.BestAvailable{
			CategoryID: in.Body.CategoryID, Quantity: in.Body.Quantity, AdjacentOnly: in.Body.AdjacentOnly,
		},
	})
	if err != nil {
		return nil, err
	}
	out := &CreateBestAvailableHoldOutput{
		Location: holdOutput(hold).Location, RateLimitPolicy: limit.policy, RateLimit: limit.state,
		Body: BestAvailableHoldBody{HoldBody: holdOutput(hold).Body, Seats: make([]HeldSeatBody, 0, len(hold.Seats))},
	}
	for _, st := range hold.Seats {
		out.Body.Seats = append(out.Body.Seats, HeldSeatBody{ID: st.ID, Section: st.Section, Label: st.Label})
	}
	return out, nil
}

// hold is a hold of either kind past its input checks: p without
// CorrelationID, SeatLimit and HoldTTL, which are set on the way. It takes
// the hold from the buyer's budget (holdBudget) first, and returns the
// budget's headers with the hold.
func (h *Handlers) hold(ctx context.Context, admissionToken string, p purchase.HoldParams) (purchase.Hold, holdLimit, error) {
	limit, err := h.holdBudget(p.UserID)
	if err != nil {
		return purchase.Hold{}, limit, err
	}
	hold, err := h.admittedHold(ctx, admissionToken, p)
	return hold, limit, err
}

// admittedHold is hold once the buyer's budget allowed it: the admission
// token routes it to its cell, or a refused token falls back to the
// stored answer of a retry (replayHold).
func (h *Handlers) admittedHold(ctx context.Context, admissionToken string, p purchase.HoldParams) (purchase.Hold, error) {
	eventID, user := p.EventID, p.UserID
	// The token names the event's purchase cell, so a hold goes straight
	// to that cell's database: no directory lookup, no other cell touched.
	claims, err := h.cfg.Admission.VerifyForRouting(admissionToken, user, eventID)
	c, served := h.cells.Cell(claims.Cell)
	switch {
	case err != nil:
	case !served:
		err = errors.New("issued for a cell this process does not serve")
	case c.Room.Revoked(claims.ID):
		err = errors.New("revoked")
	}
	if err != nil {
		return h.replayHold(ctx, p, err)
	}
	// From the request's arrival, not from here: the controller must see
	// the time spent reading, authenticating and validating the request
	// and waiting for a CPU on the way, which R governs as much as the
	// database work.
	defer func() { c.Room.ObserveHold(time.Since(requestStart(ctx))) }()
	p.CorrelationID = CorrelationID(ctx)
	hold, err := c.Purchase.Checkout(ctx, c.Room, p)
	switch {
	case errors.Is(err, purchase.ErrSeatLimitUnknown) && errors.Is(err, waitingroom.ErrUnavailable):
		// Its own detail and a shorter Retry-After: the settings are cached.
		h.logger.WarnContext(ctx, "seat limit unknown", "correlation_id", CorrelationID(ctx), "event_id", eventID, "error", err.Error())
		return purchase.Hold{}, huma.ErrorWithHeaders(problem(http.StatusServiceUnavailable, TypeUnavailable,
			"The onsale's settings cannot be read right now; nothing was held. Try again shortly."), retryAfter(2*time.Second))
	case errors.Is(err, purchase.ErrSeatLimitUnknown):
		return purchase.Hold{}, h.internal(ctx, "read seat limit", err, "event_id", eventID)
	case err != nil:
		return purchase.Hold{}, h.problemFor(ctx, err, "hold seats", "No such event.", "event_id", eventID)
	}
	h.cells.RememberOrder(hold.OrderID, c)
	telemetry.Annotate(ctx, telemetry.OrderID.String(hold.OrderID.String()), telemetry.HoldID.String(hold.HoldID.String()),
		telemetry.Cell.String(c.Name), attribute.String("boxoffice.correlation_id", CorrelationID(ctx)))
	h.logger.InfoContext(ctx, "seats held", "correlation_id", CorrelationID(ctx), "causation_id", "",
		"order_id", hold.OrderID, "hold_id", hold.HoldID, "event_id", eventID, "cell", c.Name, "replayed", hold.Replayed)
	return hold, nil
}

func holdOutput(hold purchase.Hold) *CreateHoldOutput {
	return &CreateHoldOutput{
		Location: "/v1/orders/" + hold.OrderID.String(),
		Body:     HoldBody{OrderID: hold.OrderID, HoldID: hold.HoldID, Status: hold.Status, ExpiresAt: hold.ExpiresAt},
	}
}

// replayHold answers a hold whose admission token does not admit it
// (refused, for the log): a retry of a hold that succeeded (same buyer,
// Idempotency-Key, event and seats) gets its order, as invariant 3 says,
// even though its admission has since expired or been revoked; the same
// key with another request is the 409 idempotency-conflict; any other
// request is the 403 admission-invalid problem, having held nothing. Only
// an admission may create a hold: Replay reads the key and writes nothing.
func (h *Handlers) replayHold(ctx context.Context, p purchase.HoldParams, refused error) (purchase.Hold, error) {
	forbidden := func() error {
		h.logger.InfoContext(ctx, "admission token rejected", "correlation_id", CorrelationID(ctx),
			"event_id", p.EventID, "reason", refused.Error())
		return problem(http.StatusForbidden, TypeAdmissionInvalid,
			"The admission token is invalid, expired, revoked, or not for this buyer and event.")
	}
	c, err := h.cells.ForEvent(ctx, p.EventID)
	switch {
	case errors.Is(err, cells.ErrUnavailable):
		// Perhaps a retry whose answer is in that cell: not a 403 yet.
		return purchase.Hold{}, h.cellProblem(ctx, err, "", "event_id", p.EventID)
	case err != nil:
		return purchase.Hold{}, forbidden()
	}
	hold, err := c.Purchase.Replay(ctx, p)
	switch {
	case errors.Is(err, purchase.ErrKeyUnknown):
		return purchase.Hold{}, forbidden()
	case err != nil:
		return purchase.Hold{}, h.problemFor(ctx, err, "replay hold", "", "event_id", p.EventID)
	}
	h.cells.RememberOrder(hold.OrderID, c)
	h.logger.InfoContext(ctx, "hold replayed without admission", "correlation_id", CorrelationID(ctx),
		"order_id", hold.OrderID, "event_id", p.EventID, "cell", c.Name, "admission", refused.Error())
	return hold, nil
}
