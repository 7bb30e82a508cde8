package handlers

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
)

// The problem types of the contract: what each operation's error
// responses may carry, declared in openapi.yaml so that a client can
// switch on a response's type, and checked by the handler tests
// (contract_test.go fails on a problem whose type its operation's response
// does not declare).

// commonProblems are the problem types any operation may answer with the
// status, when it declares the status: the edge's and the platform's
// (input, authentication, limits, the database). A 409 has no common
// type: each operation that answers one says which.
var commonProblems = map[int][]string{
	http.StatusBadRequest:                  {TypeMalformed},
	http.StatusUnauthorized:                {TypeUnauthorized},
	http.StatusForbidden:                   {TypeForbidden},
	http.StatusNotFound:                    {TypeNotFound},
	http.StatusRequestTimeout:              {TypeRequestTimeout},
	http.StatusRequestEntityTooLarge:       {TypePayloadTooLarge},
	http.StatusUnsupportedMediaType:        {TypeUnsupportedMedia},
	http.StatusUnprocessableEntity:         {TypeValidation},
	http.StatusTooManyRequests:             {TypeRateLimited},
	http.StatusRequestHeaderFieldsTooLarge: {TypeHeadersTooLarge},
	http.StatusInternalServerError:         {TypeInternal},
	http.StatusServiceUnavailable:          {TypeUnavailable, TypeFenced, TypeCellUnavailable},
}

// operationProblems are the problem types of one operation beyond the
// common ones, by operation id and status: each names a domain outcome the
// client can act on.
var operationProblems = map[string]map[int][]string{
	"create-hold": {
		http.StatusForbidden: {TypeAdmissionInvalid, TypePresaleCodeRequired},
		http.StatusConflict:  {TypeSeatUnavailable, TypeSeatLimit, TypeIdempotencyConflict, TypePhaseCategory, TypePresaleSeatLimit},
	},
	"create-best-available-hold": {
		http.StatusForbidden: {TypeAdmissionInvalid, TypePresaleCodeRequired},
		http.StatusConflict:  {TypeNotEnoughSeats, TypeSeatLimit, TypeIdempotencyConflict, TypePhaseCategory, TypePresaleSeatLimit},
	},
	"join-waiting-room": {http.StatusForbidden: {TypePresaleCodeRequired}},
	"join-waitlist":     {http.StatusConflict: {TypeWaitlistSeatsAvailable, TypeWaitlistJoined}},
	"accept-waitlist-offer": {
		http.StatusForbidden: {TypePresaleCodeRequired},
		http.StatusConflict:  {TypeWaitlistOfferNotLive, TypeSeatUnavailable, TypeSeatLimit, TypePhaseCategory, TypePresaleSeatLimit},
	},
	"set-onsale-phases":       {http.StatusConflict: {TypeConflict}},
	"create-presale-codes":    {http.StatusConflict: {TypeConflict, TypeIdempotencyConflict}},
	"create-event":            {http.StatusConflict: {TypeIdempotencyConflict}},
	"block-seats":             {http.StatusConflict: {TypeSeatUnavailable}},
	"issue-order":             {http.StatusConflict: {TypeSeatUnavailable, TypeIdempotencyConflict}},
	"create-api-key":          {http.StatusConflict: {TypeAPIKeyLimit, TypeIdempotencyConflict}},
	"create-webhook-endpoint": {http.StatusConflict: {TypeEndpointLimit, TypeEndpointURLInUse, TypeIdempotencyConflict}},
	"update-webhook-endpoint": {http.StatusConflict: {TypeEndpointURLInUse}},
	"rotate-webhook-secret":   {http.StatusConflict: {TypeIdempotencyConflict}},
	// TypeConflict: the endpoint is disabled.
	"recover-webhook-endpoint": {http.StatusConflict: {TypeConflict, TypeIdempotencyConflict}},
	"test-webhook-endpoint":    {http.StatusConflict: {TypeConflict, TypeIdempotencyConflict}},
	"replay-webhook-message":   {http.StatusConflict: {TypeConflict, TypeIdempotencyConflict}},
	"cancel-order":             {http.StatusConflict: {TypeOrderNotCancelable}},
	"refund-order":             {http.StatusConflict: {TypeOrderNotRefundable, TypeIdempotencyConflict}},
	// TypeConflict: the intent no longer awaits a payment method.
	"sandbox-authorize-payment-intent": {http.StatusConflict: {TypeConflict}},
	"sandbox-decline-payment-intent":   {http.StatusConflict: {TypeConflict}},
	"sandbox-challenge-payment-intent": {http.StatusConflict: {TypeConflict}},
	"check-in": {
		http.StatusConflict:            {TypeAlreadyCheckedIn, TypeTicketRevoked},
		http.StatusUnprocessableEntity: {TypeScannedAtOutOfRange, TypeTicketInvalid},
	},
}

// problemDetails are an example detail of each problem type, as the
// server words it.
var problemDetails = map[string]string{
	TypeMalformed:              "The request body could not be read.",
	TypeUnauthorized:           "The bearer token is invalid or expired.",
	TypeForbidden:              "This operation is not for your role.",
	TypeNotFound:               "No such event.",
	TypeRequestTimeout:         "The request body did not arrive in time.",
	TypeConflict:               "The endpoint is disabled; enable it first.",
	TypePayloadTooLarge:        "The request body is larger than this operation accepts.",
	TypeUnsupportedMedia:       "The request body is not application/json.",
	TypeValidation:             "Validation failed.",
	TypeRateLimited:            "You are asking for holds too fast; nothing was held. Retry after Retry-After, with the same Idempotency-Key.",
	TypeHeadersTooLarge:        "The request's headers are too large.",
	TypeInternal:               "The server could not complete the request.",
	TypeUnavailable:            "The database is busy; nothing was changed. Retry after Retry-After.",
	TypeFenced:                 "This region was failed over and writes nothing; retry against the region now serving.",
	TypeCellUnavailable:        "The purchase cell that serves this is not answering; other events are not affected. Try again shortly.",
	TypeAdmissionInvalid:       "The admission token is invalid, expired, revoked, or not for this buyer and event.",
	TypeSeatUnavailable:        "Some of the seats are held by someone else or sold.",
	TypeSeatLimit:              "This hold would give you more seats of this event than its organizer allows per buyer.",
	TypePresaleCodeRequired:    "This onsale is in a presale: join its waiting room with a valid presale code (X-Presale-Code).",
	TypePhaseCategory:          "Some of the seats are of a category not on sale in the onsale's current phase.",
	TypePresaleSeatLimit:       "This hold would give your presale code's buyers more seats than the code allows.",
	TypeNotEnoughSeats:         "The category has fewer free seats than asked for (or, adjacent only, no run of them side by side); nothing was held.",
	TypeIdempotencyConflict:    "This Idempotency-Key was already used for a different request.",
	TypeWaitlistSeatsAvailable: "Seats of this category are on sale: hold them instead of joining the waitlist.",
	TypeWaitlistJoined:         "You are on this event's waitlist already.",
	TypeWaitlistOfferNotLive:   "This waitlist entry has no offer to accept: it is still waiting, or its offer expired and passed to the next buyer.",
	TypeAPIKeyLimit:            "You have the most API keys allowed that are not revoked; revoke one first.",
	TypeEndpointLimit:          "You have 20 webhook endpoints, the most allowed; delete one first.",
	TypeEndpointURLInUse:       "Another of your webhook endpoints has this URL; change that one instead.",
	TypeOrderNotCancelable:     "Only an order awaiting payment can be canceled; a paid order can be refunded by the event's organizer.",
	TypeOrderNotRefundable:     "Only a paid or ticketed order can be refunded.",
	TypeAlreadyCheckedIn:       "This ticket was already checked in.",
	TypeTicketRevoked:          "This ticket was revoked by a refund; it admits nobody.",
	TypeScannedAtOutOfRange:    "scannedAt is before the ticket was issued or after the server's now.",
	TypeTicketInvalid:          "This is not a valid ticket for this event.",
}

// problemTypesKey is the extension of a response that lists the problem
// types it may carry.
const problemTypesKey = "x-problem-types"

// declareProblemTypes lists on each error response of each operation the
// problem types it may carry (problemTypesKey), with an example of each,
// and declares the Problem's type a URI reference (the types are paths,
// relative to the API's origin). It panics when operationProblems names
// an operation or a status the document does not have: a programmer
// error, seen by every test.
func declareProblemTypes(doc *huma.OpenAPI) {
	if s := doc.Components.Schemas.Map()["Problem"]; s != nil && s.Properties["type"] != nil {
		t := s.Properties["type"]
		t.Format = "uri-reference"
		t.Examples = []any{TypeSeatUnavailable}
		t.Description = "The problem type: a URI reference, relative to the API's origin (or about:blank). Stable: clients may switch on it."
	}
	declared := map[string]map[int]bool{}
	for _, item := range doc.Paths {
		for _, op := range operations(item) {
			declared[op.OperationID] = map[int]bool{}
			for code, res := range op.Responses {
				status, err := strconv.Atoi(code)
				mt := res.Content["application/problem+json"]
				if err != nil || status < 400 || mt == nil {
					continue
				}
				declared[op.OperationID][status] = true
				types := slices.Concat(commonProblems[status], operationProblems[op.OperationID][status])
				if res.Extensions == nil {
					res.Extensions = map[string]any{}
				}
				res.Extensions[problemTypesKey] = types
				mt.Examples = map[string]*huma.Example{}
				for _, typ := range types {
					p := problem(status, typ, problemDetails[typ])
					switch typ {
					case TypeSeatUnavailable:
						p.SeatIDs = []uuid.UUID{uuid.MustParse("01936a4e-7c1e-7d5a-9a63-2f4d8c0b1e27")}
					case TypeValidation:
						p.Errors = []*huma.ErrorDetail{{Location: "body.seatIds", Message: "expected 1 to 8 seats"}}
					}
					mt.Examples[strings.TrimPrefix(typ, "/problems/")] = &huma.Example{Summary: typ, Value: p}
				}
			}
		}
	}
	for op, byStatus := range operationProblems {
		if declared[op] == nil && strings.HasPrefix(op, "sandbox-") {
			continue // registered only with the sandbox (or for the contract)
		}
		for status := range byStatus {
			if !declared[op][status] {
				panic(fmt.Sprintf("handlers: operationProblems names %s %d, which the document does not declare", op, status))
			}
		}
	}
}
