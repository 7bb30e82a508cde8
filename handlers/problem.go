package handlers

import (
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"
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
// or malformed header is a 400 as DESIGN.md promises, and no 5xx ever
// carries an error's text.
func newError(status int, msg string, errs ...error) huma.StatusError {
	if status >= 500 {
		return problem(status, typeForStatus(status), "The server could not complete the request.")
	}
	p := problem(status, typeForStatus(status), msg)
	for _, err := range errs {
		if err == nil {
			continue
		}
		d, ok := err.(huma.ErrorDetailer)
		if !ok {
			p.Errors = append(p.Errors, &huma.ErrorDetail{Message: err.Error()})
			continue
		}
		detail := d.ErrorDetail()
		p.Errors = append(p.Errors, detail)
		if status == http.StatusUnprocessableEntity && strings.HasPrefix(detail.Location, "header.") {
			p.Status, p.Title, p.Type = http.StatusBadRequest, http.StatusText(http.StatusBadRequest), TypeMalformed
		}
	}
	return p
}

func init() {
	huma.NewError = newError
}
