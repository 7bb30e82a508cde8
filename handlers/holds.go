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
	"boxoffice/platform/auth"
	"boxoffice/platform/telemetry"
)

// CreateHoldInput asks to hold seats.
type CreateHoldInput struct {
	EventID        string `path:"eventId" format:"uuid" doc:"Event id (UUID)."`
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

func (h *Handlers) registerHolds(api huma.API) {
	register(api, secured(huma.Operation{
		OperationID: "create-hold", Method: http.MethodPost, Path: "/v1/events/{eventId}/holds",
		Summary: "Hold seats",
		Description: "Buyers only, with an admission token. Holds all requested seats or none, " +
			"creating an order pending payment. Idempotent per user and Idempotency-Key: a retry answers the first request's order " +
			"with its current status, even once the admission token has expired or been revoked (a new key needs a valid token). " +
			"Rate limited per buyer (5 a second, bursts of 10, by default): beyond it 429 with Retry-After, and nothing is held.",
		Tags: []string{"Holds"}, DefaultStatus: http.StatusAccepted,
		MaxBodyBytes: 4 << 10,
		Errors: []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict,
			http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity, http.StatusTooManyRequests},
	}, auth.RoleBuyer), h.createHold)
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
	user := identity(ctx).UserID
	// Every hold the buyer asks for counts, a retry with an Idempotency-Key
	// that already succeeded too: the limit is decided before anything is
	// verified or read, so a refused hold costs no database work at all.
	left, wait, ok := h.limits.holds.allowBudget(user, time.Now())
	policy, state := left.headers("holds")
	if !ok {
		return nil, huma.ErrorWithHeaders(
			rateLimited("You are asking for holds too fast; nothing was held. Retry after Retry-After, with the same Idempotency-Key.", wait),
			http.Header{"RateLimit-Policy": {policy}, "RateLimit": {state}})
	}
	out, err := h.hold(ctx, in, eventID, user)
	if out != nil {
		out.RateLimitPolicy, out.RateLimit = policy, state
	}
	return out, err
}

// hold is createHold past its input checks and the buyer's rate limit.
func (h *Handlers) hold(ctx context.Context, in *CreateHoldInput, eventID, user uuid.UUID) (*CreateHoldOutput, error) {
	// The token names the event's purchase cell, so a hold goes straight
	// to that cell's database: no directory lookup, no other cell touched.
	claims, err := h.cfg.Admission.VerifyForRouting(in.AdmissionToken, user, eventID)
	c, served := h.cells.Cell(claims.Cell)
	switch {
	case err != nil:
	case !served:
		err = errors.New("issued for a cell this process does not serve")
	case c.Room.Revoked(claims.ID):
		err = errors.New("revoked")
	}
	if err != nil {
		return h.replayHold(ctx, purchase.HoldParams{
			UserID: user, EventID: eventID, SeatIDs: in.Body.SeatIDs, IdempotencyKey: in.IdempotencyKey,
		}, err)
	}
	// From the request's arrival, not from here: the controller must see
	// the time spent reading, authenticating and validating the request
	// and waiting for a CPU on the way, which R governs as much as the
	// database work.
	defer func() { c.Room.ObserveHold(time.Since(requestStart(ctx))) }()
	hold, err := c.Purchase.Checkout(ctx, c.Room, purchase.HoldParams{
		UserID:         user,
		EventID:        eventID,
		SeatIDs:        in.Body.SeatIDs,
		IdempotencyKey: in.IdempotencyKey,
		CorrelationID:  CorrelationID(ctx),
	})
	switch {
	case errors.Is(err, purchase.ErrSeatLimitUnknown) && errors.Is(err, waitingroom.ErrUnavailable):
		// Its own detail and a shorter Retry-After: the settings are cached.
		h.logger.WarnContext(ctx, "seat limit unknown", "correlation_id", CorrelationID(ctx), "event_id", eventID, "error", err.Error())
		return nil, huma.ErrorWithHeaders(problem(http.StatusServiceUnavailable, TypeUnavailable,
			"The onsale's settings cannot be read right now; nothing was held. Try again shortly."), retryAfter(2*time.Second))
	case errors.Is(err, purchase.ErrSeatLimitUnknown):
		return nil, h.internal(ctx, "read seat limit", err, "event_id", eventID)
	case err != nil:
		return nil, h.problemFor(ctx, err, "hold seats", "No such event.", "event_id", eventID)
	}
	h.cells.RememberOrder(hold.OrderID, c)
	telemetry.Annotate(ctx, telemetry.OrderID.String(hold.OrderID.String()), telemetry.HoldID.String(hold.HoldID.String()),
		telemetry.Cell.String(c.Name), attribute.String("boxoffice.correlation_id", CorrelationID(ctx)))
	h.logger.InfoContext(ctx, "seats held", "correlation_id", CorrelationID(ctx), "causation_id", "",
		"order_id", hold.OrderID, "hold_id", hold.HoldID, "event_id", eventID, "cell", c.Name, "replayed", hold.Replayed)
	return holdOutput(hold), nil
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
func (h *Handlers) replayHold(ctx context.Context, p purchase.HoldParams, refused error) (*CreateHoldOutput, error) {
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
		return nil, h.cellProblem(ctx, err, "", "event_id", p.EventID)
	case err != nil:
		return nil, forbidden()
	}
	hold, err := c.Purchase.Replay(ctx, p)
	switch {
	case errors.Is(err, purchase.ErrKeyUnknown):
		return nil, forbidden()
	case err != nil:
		return nil, h.problemFor(ctx, err, "replay hold", "", "event_id", p.EventID)
	}
	h.cells.RememberOrder(hold.OrderID, c)
	h.logger.InfoContext(ctx, "hold replayed without admission", "correlation_id", CorrelationID(ctx),
		"order_id", hold.OrderID, "event_id", p.EventID, "cell", c.Name, "admission", refused.Error())
	return holdOutput(hold), nil
}
