package handlers

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"boxoffice/auth"
	"boxoffice/catalog"
)

// WaitingRoomOutput is a buyer's place in the waiting room.
type WaitingRoomOutput struct {
	Body struct {
		Status         string    `json:"status" enum:"admitted" doc:"admitted: the buyer may hold seats with admissionToken until expiresAt."`
		AdmissionToken string    `json:"admissionToken" doc:"Send as X-Admission-Token on holds. Bound to you, this event and its purchase cell."`
		ExpiresAt      time.Time `json:"expiresAt"`
	}
}

func (h *Handlers) registerWaitingRoom(api huma.API) {
	op := huma.Operation{
		OperationID: "join-waiting-room", Method: http.MethodPost, Path: "/v1/events/{eventId}/waiting-room",
		Summary:     "Join the waiting room",
		Description: "Buyers only. While the onsale is not congested the buyer is admitted at once and gets an admission token.",
		Tags:        []string{"Waiting room"},
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}
	huma.Register(api, secured(op, auth.RoleBuyer), h.admit)
	op.OperationID, op.Method, op.Summary = "get-waiting-room", http.MethodGet, "Get your place in the waiting room"
	huma.Register(api, secured(op, auth.RoleBuyer), h.admit)
}

func (h *Handlers) admit(ctx context.Context, in *EventPathInput) (*WaitingRoomOutput, error) {
	eventID, err := parseUUID(in.EventID, "path.eventId")
	if err != nil {
		return nil, err
	}
	ev, err := h.cfg.Catalog.Event(ctx, eventID)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		return nil, problem(http.StatusNotFound, TypeNotFound, "No such event.")
	case err != nil:
		return nil, h.internal(ctx, "admit: get event", err)
	}
	token, claims, err := h.cfg.Admission.Issue(identity(ctx).UserID, ev.ID, ev.PurchaseCell)
	if err != nil {
		return nil, h.internal(ctx, "admit: issue token", err)
	}
	out := &WaitingRoomOutput{}
	out.Body.Status = "admitted"
	out.Body.AdmissionToken = token
	out.Body.ExpiresAt = claims.ExpiresAt.UTC()
	return out, nil
}
