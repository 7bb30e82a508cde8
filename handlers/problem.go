package handlers

import (
	"cmp"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/validation"
	"github.com/google/uuid"
)

// Problem types. Each is stable: clients may switch on it.
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
)

// Problem is an RFC 9457 problem. Every error response of the API is one,
// with a stable Type and never any internal text.
type Problem struct {
	huma.ErrorModel
	// SeatIDs names the seats that made a hold fail (seat-unavailable).
	SeatIDs []uuid.UUID `json:"seatIds,omitempty" doc:"The requested seats that are held by someone else or sold."`
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
// or malformed header is a 400 as DESIGN.md promises, and no problem ever
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
