package handlers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/validation"
	"github.com/google/uuid"

	"boxoffice/domain/cells"
	"boxoffice/domain/payments"
	"boxoffice/domain/purchase"
	"boxoffice/domain/waitingroom"
	"boxoffice/domain/waitlist"
	"boxoffice/domain/webhooks"
	"boxoffice/platform/apikey"
	"boxoffice/platform/fault"
	"boxoffice/platform/idempotency"
	"boxoffice/platform/page"
)

// Problem types: every type the API answers with, in one place (the
// catalogue, problem_catalog.go, says which operations answer each). Each
// is stable: clients may switch on it.
const (
	TypeMalformed           = "/problems/malformed-request"
	TypeUnauthorized        = "/problems/unauthorized"
	TypeForbidden           = "/problems/forbidden"
	TypeAdmissionInvalid    = "/problems/admission-invalid"
	TypeNotFound            = "/problems/not-found"
	TypeConflict            = "/problems/conflict"
	TypeSeatUnavailable     = "/problems/seat-unavailable"
	TypeIdempotencyConflict = "/problems/idempotency-conflict"
	TypeOrderNotCancelable  = "/problems/order-not-cancelable"
	TypeOrderNotRefundable  = "/problems/order-not-refundable"
	TypePayloadTooLarge     = "/problems/payload-too-large"
	TypeValidation          = "/problems/validation"
	TypeRateLimited         = "/problems/rate-limited"
	TypeMethodNotAllowed    = "/problems/method-not-allowed"
	TypeRequestTimeout      = "/problems/request-timeout"
	TypeUnsupportedMedia    = "/problems/unsupported-media-type"
	TypeHeadersTooLarge     = "/problems/headers-too-large"
	TypeInternal            = "/problems/internal"
	TypeUnavailable         = "/problems/unavailable"
	// TypeFenced: this deployment's region was failed over (its region
	// epoch is no longer current); it writes nothing. Retry against the
	// region now serving.
	TypeFenced = "/problems/fenced"
	// TypeCellUnavailable: the purchase cell that holds the event or order
	// does not answer. Other events keep selling; retry after Retry-After.
	TypeCellUnavailable = "/problems/cell-unavailable"

	// Check-in

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

	// Onsale phases and presale codes

	// TypePresaleCodeRequired: the onsale's phase in force is a presale,
	// and the buyer has no valid code (join) or redeemed none (hold).
	TypePresaleCodeRequired = "/problems/presale-code-required"
	// TypePhaseCategory: a seat's category is not on sale in the phase
	// in force.
	TypePhaseCategory = "/problems/phase-category"
	// TypePresaleSeatLimit: the hold would exceed the presale code's seats.
	TypePresaleSeatLimit = "/problems/presale-seat-limit"
	// TypeNotEnoughSeats: a best-available hold found fewer free seats of
	// the category than asked (or, adjacent only, no free run of them).
	TypeNotEnoughSeats = "/problems/not-enough-seats"

	// The waitlist

	// TypeWaitlistSeatsAvailable: the category has seats on sale; hold
	// them instead of joining its waitlist.
	TypeWaitlistSeatsAvailable = "/problems/waitlist-seats-available"
	// TypeWaitlistJoined: the buyer is on the event's waitlist already.
	TypeWaitlistJoined = "/problems/waitlist-joined"
	// TypeWaitlistOfferNotLive: the entry has no offer to accept (still
	// waiting, expired, or left).
	TypeWaitlistOfferNotLive = "/problems/waitlist-offer-not-live"

	// Webhook endpoints

	// TypeEndpointLimit: the organizer has the most webhook endpoints
	// allowed (20 unless configured), enabled or disabled; delete one
	// first.
	TypeEndpointLimit = "/problems/endpoint-limit"
	// TypeEndpointURLInUse: another of the organizer's endpoints, enabled
	// or disabled, has this URL (compared with scheme and host in lower
	// case, without a default port or a trailing dot on the host); change
	// that one instead.
	TypeEndpointURLInUse = "/problems/endpoint-url-in-use"

	// API keys

	// TypeAPIKeyLimit: the organizer has the most API keys that are not
	// revoked (25); revoke one first.
	TypeAPIKeyLimit = "/problems/api-key-limit"

	// Holds

	// TypeSeatLimit: the hold would take the buyer over the event's
	// per-buyer seat limit.
	TypeSeatLimit = "/problems/seat-limit"
)

// Problem is an RFC 9457 problem. Every error response of the API is one,
// with a stable Type and never any internal text.
type Problem struct {
	huma.ErrorModel
	// SeatIDs names the seats that made a hold fail (seat-unavailable).
	SeatIDs []uuid.UUID `json:"seatIds,omitempty" doc:"The requested seats that are held by someone else or sold."`
	// CheckIn is the ticket's first check-in (already-checked-in).
	CheckIn *CheckInBody `json:"checkIn,omitempty" doc:"When and at which gate the ticket was first used (already-checked-in)."`
}

func problem(status int, typ, detail string) *Problem {
	return &Problem{ErrorModel: huma.ErrorModel{
		Type:   typ,
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
	}}
}

// invalid is the 422 problem of one input at location that breaks a rule
// msg states. It never repeats the input.
func invalid(location, msg string) *Problem {
	p := problem(http.StatusUnprocessableEntity, TypeValidation, "Validation failed.")
	p.Errors = []*huma.ErrorDetail{{Location: location, Message: msg}}
	return p
}

func typeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return TypeMalformed
	case http.StatusUnauthorized:
		return TypeUnauthorized
	case http.StatusForbidden:
		return TypeForbidden
	case http.StatusNotFound:
		return TypeNotFound
	case http.StatusMethodNotAllowed:
		return TypeMethodNotAllowed
	case http.StatusRequestTimeout:
		return TypeRequestTimeout
	case http.StatusUnsupportedMediaType:
		return TypeUnsupportedMedia
	case http.StatusRequestHeaderFieldsTooLarge:
		return TypeHeadersTooLarge
	case http.StatusConflict:
		return TypeConflict
	case http.StatusRequestEntityTooLarge:
		return TypePayloadTooLarge
	case http.StatusUnprocessableEntity:
		return TypeValidation
	case http.StatusTooManyRequests:
		return TypeRateLimited
	case http.StatusServiceUnavailable:
		return TypeUnavailable
	}
	if status >= 500 {
		return TypeInternal
	}
	return "about:blank"
}

// newError replaces huma.NewError so that the problems huma itself writes
// (validation, body parsing, body size) carry our stable types, a missing
// or malformed header is a 400 as the README promises, and no problem ever
// carries what the client sent or what a parser said about it: each detail
// is a location and a short message, and the whole problem is bounded in
// size whatever the request was (see detailOf).
func newError(status int, msg string, errs ...error) huma.StatusError {
	if status == http.StatusInternalServerError && msg == "cannot read request body" {
		// huma's word for a body the client broke off or framed wrongly
		// (a bad chunk): the client's error, not the server's.
		return problem(http.StatusBadRequest, TypeMalformed, "The request body could not be read.")
	}
	if status >= 500 {
		return problem(status, typeForStatus(status), "The server could not complete the request.")
	}
	p := problem(status, typeForStatus(status), msg)
	for _, err := range errs {
		if err == nil {
			continue
		}
		if len(p.Errors) == maxDetails {
			p.Errors = append(p.Errors, &huma.ErrorDetail{Location: "body", Message: "further errors omitted"})
			break
		}
		detail := detailOf(status, err)
		p.Errors = append(p.Errors, detail)
		if status == http.StatusUnprocessableEntity && strings.HasPrefix(detail.Location, "header.") {
			p.Status, p.Title, p.Type = http.StatusBadRequest, http.StatusText(http.StatusBadRequest), TypeMalformed
		}
	}
	return p
}

const (
	// maxDetails bounds the errors one problem lists.
	maxDetails = 16
	// maxDetailText bounds a detail's location and message, in bytes.
	maxDetailText = 200
)

// detailOf is the client's view of one error: where, and what was
// expected. It never has a Value (huma would echo the offending input,
// the whole body for a parse error), and only a message in the shape of a
// schema rule ("expected …") is kept: anything else is what a decoder
// said, which names Go types and quotes the input, and is replaced.
func detailOf(status int, err error) *huma.ErrorDetail {
	d, ok := err.(huma.ErrorDetailer)
	if !ok {
		return &huma.ErrorDetail{Location: "body", Message: genericMessage(status)}
	}
	detail := d.ErrorDetail()
	loc, msg := cmp.Or(detail.Location, "body"), detail.Message
	if kind, missing := strings.CutPrefix(msg, "required "); missing && strings.HasSuffix(kind, " parameter is missing") {
		// huma's word for a required header, query or path parameter that
		// was not sent: say so, rather than blame the body.
		msg = "expected the " + strings.TrimSuffix(kind, " parameter is missing") + " to be present"
	}
	if !strings.HasPrefix(msg, "expected ") && msg != validation.MsgUnexpectedProperty {
		msg = genericMessage(status)
	}
	return &huma.ErrorDetail{Location: bounded(loc), Message: bounded(msg)}
}

func genericMessage(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "expected a JSON document"
	case http.StatusRequestEntityTooLarge:
		return "the body is too large"
	case http.StatusUnsupportedMediaType:
		return "expected Content-Type application/json"
	}
	return "expected a body matching the operation's schema"
}

// bounded is s cut to maxDetailText bytes of valid UTF-8 (a location may
// hold an object key the client chose).
func bounded(s string) string {
	s = strings.ToValidUTF8(s, "\ufffd")
	if len(s) <= maxDetailText {
		return s
	}
	cut := maxDetailText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// formatRule is huma.ErrorFormatter: the messages of schema rules keep
// their values (the schema's own bounds and patterns), but an error a
// format check wraps (uuid.Parse's "invalid UUID length: 1") is left out.
func formatRule(format string, args ...any) string {
	for _, a := range args {
		if _, isErr := a.(error); isErr {
			return strings.TrimSuffix(strings.TrimSpace(strings.ReplaceAll(format, "%v", "")), ":")
		}
	}
	return fmt.Sprintf(format, args...)
}

func init() {
	huma.NewError = newError
	huma.ErrorFormatter = formatRule
}

// codeProblem is the problem of an error by its fault.Code, when no
// specific problem names the error: the one mapping of the API from the
// domain's kinds of failure to HTTP. An error of a code not here is
// answered by Handlers.internal, logged and never echoed:
// fault.CodeUnknown and fault.CodePermanent are the server's fault, and
// fault.CodeUnavailable has no one answer — an operation that documents a
// 503 words it and its Retry-After itself (the waiting room, a hold whose
// seat limit cannot be read), and elsewhere internal tells a database
// that does not answer (the 503 cell-unavailable) from a failure (500).
var codeProblem = map[fault.Code]struct {
	status int
	typ    string
}{
	fault.CodeNotFound:  {http.StatusNotFound, TypeNotFound},
	fault.CodeConflict:  {http.StatusConflict, TypeConflict},
	fault.CodeInvalid:   {http.StatusUnprocessableEntity, TypeValidation},
	fault.CodeForbidden: {http.StatusForbidden, TypeForbidden},
}

// specificProblem is a problem type the API documents for one domain
// error: its status, type and detail, whichever operation returns it
// (clients switch on the type; an operation words its detail itself only
// where its documentation says so).
type specificProblem struct {
	err    error
	status int
	typ    string
	detail string
	// errors are the problem's details (a 422's locations), if any.
	errors []*huma.ErrorDetail
}

// specificProblems are checked in order, before the error's code.
var specificProblems = []specificProblem{
	{err: purchase.ErrIdempotencyConflict, status: http.StatusConflict, typ: TypeIdempotencyConflict,
		detail: "This Idempotency-Key was already used for a different request."},
	{err: idempotency.ErrConflict, status: http.StatusConflict, typ: TypeIdempotencyConflict,
		detail: "This Idempotency-Key was already used for a different request."},
	{err: purchase.ErrSeatLimit, status: http.StatusConflict, typ: TypeSeatLimit,
		detail: "This hold would give you more seats of this event than its organizer allows per buyer."},
	{err: purchase.ErrPresaleCodeRequired, status: http.StatusForbidden, typ: TypePresaleCodeRequired,
		detail: "This onsale is in a presale and you joined it with no valid presale code; join its waiting room with one (X-Presale-Code)."},
	{err: waitingroom.ErrPresaleCode, status: http.StatusForbidden, typ: TypePresaleCodeRequired,
		detail: "This onsale is in a presale: send a valid presale code with a use left as X-Presale-Code."},
	{err: purchase.ErrPhaseCategory, status: http.StatusConflict, typ: TypePhaseCategory,
		detail: "Some of the seats are of a category not on sale in the onsale's current phase."},
	{err: purchase.ErrPresaleSeatLimit, status: http.StatusConflict, typ: TypePresaleSeatLimit,
		detail: "This hold would give your presale code's buyers more seats than the code allows."},
	{err: purchase.ErrNotEnoughSeats, status: http.StatusConflict, typ: TypeNotEnoughSeats,
		detail: "The category has fewer free seats than you asked for (or, adjacent only, no run of them side by side); nothing was held."},
	{err: purchase.ErrCategoryNotInEvent, status: http.StatusUnprocessableEntity, typ: TypeValidation,
		detail: "Validation failed.", errors: []*huma.ErrorDetail{{Location: "body.categoryId", Message: "not a price category of this event"}}},
	{err: waitingroom.ErrPhaseInUse, status: http.StatusConflict, typ: TypeConflict,
		detail: "A phase you left out has presale codes; keep it."},
	{err: waitingroom.ErrNoSuchPhase, status: http.StatusUnprocessableEntity, typ: TypeValidation,
		detail: "Validation failed.", errors: []*huma.ErrorDetail{{Location: "body.phase", Message: "no phase of this onsale has this name"}}},
	{err: waitingroom.ErrNotPresale, status: http.StatusUnprocessableEntity, typ: TypeValidation,
		detail: "Validation failed.", errors: []*huma.ErrorDetail{{Location: "body.phase", Message: "the phase is not a presale"}}},
	{err: purchase.ErrSeatsNotInEvent, status: http.StatusUnprocessableEntity, typ: TypeValidation,
		detail: "Validation failed.", errors: []*huma.ErrorDetail{{Location: "body.seatIds", Message: "every seat must be a seat of this event"}}},
	{err: purchase.ErrTicketsNotInOrder, status: http.StatusUnprocessableEntity, typ: TypeValidation,
		detail: "Validation failed.", errors: []*huma.ErrorDetail{{Location: "body.ticketIds", Message: "every ticket must be a ticket of this order"}}},
	{err: waitlist.ErrSeatsAvailable, status: http.StatusConflict, typ: TypeWaitlistSeatsAvailable,
		detail: "Seats of this category are on sale: hold them instead of joining the waitlist."},
	{err: waitlist.ErrAlreadyWaiting, status: http.StatusConflict, typ: TypeWaitlistJoined,
		detail: "You are on this event's waitlist already."},
	{err: waitlist.ErrOfferNotLive, status: http.StatusConflict, typ: TypeWaitlistOfferNotLive,
		detail: "This waitlist entry has no offer to accept: it is still waiting, or its offer expired and passed to the next buyer."},
	{err: waitlist.ErrEntryNotFound, status: http.StatusNotFound, typ: TypeNotFound, detail: "No such waitlist entry."},
	{err: waitlist.ErrCategoryNotInEvent, status: http.StatusUnprocessableEntity, typ: TypeValidation,
		detail: "Validation failed.", errors: []*huma.ErrorDetail{{Location: "body.categoryId", Message: "must be a price category of this event"}}},
	{err: purchase.ErrOrderNotCancelable, status: http.StatusConflict, typ: TypeOrderNotCancelable,
		detail: "Only an order awaiting payment can be canceled; a paid order can be refunded by the event's organizer."},
	{err: purchase.ErrOrderNotRefundable, status: http.StatusConflict, typ: TypeOrderNotRefundable,
		detail: "Only a paid or ticketed order can be refunded."},
	{err: webhooks.ErrEndpointLimit, status: http.StatusConflict, typ: TypeEndpointLimit,
		detail: "You have the most webhook endpoints allowed; delete one first."},
	{err: webhooks.ErrDuplicateURL, status: http.StatusConflict, typ: TypeEndpointURLInUse,
		detail: "Another of your webhook endpoints has this URL; change that one instead."},
	{err: webhooks.ErrEndpointDisabled, status: http.StatusConflict, typ: TypeConflict,
		detail: "The endpoint is disabled; enable it first."},
	{err: apikey.ErrLimit, status: http.StatusConflict, typ: TypeAPIKeyLimit,
		detail: "You have the most API keys allowed that are not revoked; revoke one first."},
	{err: apikey.ErrNotFound, status: http.StatusNotFound, typ: TypeNotFound, detail: "No such API key."},
	{err: page.ErrBadCursor, status: http.StatusUnprocessableEntity, typ: TypeValidation,
		detail: "Validation failed.", errors: []*huma.ErrorDetail{{Location: "query.cursor", Message: "malformed cursor"}}},
	{err: payments.ErrBadSignature, status: http.StatusBadRequest, typ: TypeMalformed,
		detail: "The Stripe-Signature does not verify, or is not dated within the tolerance."},
	{err: payments.ErrInvalidEvent, status: http.StatusBadRequest, typ: TypeMalformed,
		detail: "The event carries an id, type or code that is not Stripe's."},
}

// problemFor answers err, the error of the operation op (a few words, for
// the log), with its problem; nil for nil. In order:
//
//   - a seat-unavailable error is the 409 seat-unavailable problem naming
//     the seats; a validation error of the domain (catalog's, webhooks')
//     the 422 naming its input;
//   - an error of specificProblems is its documented problem;
//   - a purchase cell that does not answer (cells.ErrUnavailable) is the
//     503 cell-unavailable problem, logged as a warning;
//   - otherwise the problem of err's code (codeProblem), with detail;
//   - anything else goes to Handlers.internal with op and attrs.
//
// No problem ever carries err's text.
func (h *Handlers) problemFor(ctx context.Context, err error, op, detail string, attrs ...any) error {
	if err == nil {
		return nil
	}
	var seats *purchase.SeatUnavailableError
	var invalidInput *fault.ValidationError
	switch {
	case errors.As(err, &seats):
		p := problem(http.StatusConflict, TypeSeatUnavailable, "Some of the seats are held by someone else or sold.")
		p.SeatIDs = seats.SeatIDs
		return p
	case errors.As(err, &invalidInput):
		return invalid(invalidInput.Location, invalidInput.Message)
	}
	for _, sp := range specificProblems {
		if errors.Is(err, sp.err) {
			p := problem(sp.status, sp.typ, sp.detail)
			p.Errors = sp.errors
			return p
		}
	}
	if errors.Is(err, cells.ErrUnavailable) {
		h.logger.WarnContext(ctx, "purchase cell unavailable", append(attrs, "correlation_id", CorrelationID(ctx), "error", err.Error())...)
		return cellUnavailable()
	}
	cp, ok := codeProblem[fault.CodeOf(err)]
	if !ok {
		return h.internal(ctx, op, err, attrs...)
	}
	return problem(cp.status, cp.typ, detail)
}
