package handlers

import (
	"context"
	"encoding/base64"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"boxoffice/platform/auth"
)

// TicketSigningKeyBody is the key ticket scanners verify QR payloads with.
type TicketSigningKeyBody struct {
	Algorithm string `json:"algorithm" enum:"Ed25519" doc:"The signature algorithm."`
	PublicKey string `json:"publicKey" doc:"The 32-byte Ed25519 public key, standard base64." example:"11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="`
}

// TicketSigningKeyOutput is the signing key response.
type TicketSigningKeyOutput struct {
	CacheControl string `header:"Cache-Control"`
	Body         TicketSigningKeyBody
}

func (h *Handlers) registerTickets(api huma.API) {
	register(api, huma.Operation{
		OperationID: "get-ticket-signing-key", Method: http.MethodGet, Path: "/v1/ticket-signing-key",
		Summary: "Get the public key that signs tickets", Tags: []string{"Tickets"},
		Description: "A ticket's QR code holds `BX1.<body>.<signature>`, both parts unpadded base64url: body is the " +
			"ticket id, order id, seat id and event id (16 bytes each) and the issue time (8 bytes, big-endian unix " +
			"seconds); signature is the Ed25519 signature of the ASCII text `BX1.<body>`. A scanner that keeps " +
			"this key verifies tickets offline. Public; no authentication.",
		Errors: []int{http.StatusNotFound},
	}, h.getTicketSigningKey)
	register(api, secured(huma.Operation{
		OperationID: "list-revoked-tickets", Method: http.MethodGet, Path: "/v1/events/{eventId}/revoked-tickets",
		Summary: "List the event's revoked tickets", Tags: []string{"Tickets"},
		Description: "Tickets revoked by a refund, oldest revocation first. A revoked ticket's QR payload still " +
			"verifies against the signing key, so scanners that verify offline refresh this list and refuse what is " +
			"on it. For the event's organizer and their scanners (role scanner, minted for the organizer), who " +
			"refresh it; for anyone else the event does not exist (404).",
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer, auth.RoleScanner), h.listRevokedTickets)
}

// RevokedTicketBody is one revoked ticket.
type RevokedTicketBody struct {
	ID        uuid.UUID `json:"id"`
	RevokedAt time.Time `json:"revokedAt"`
}

// RevokedTicketsOutput is the event's revocation list.
type RevokedTicketsOutput struct {
	Body struct {
		Tickets []RevokedTicketBody `json:"tickets"`
	}
}

// revokedTicketsInput names the event.
type revokedTicketsInput struct {
	EventID string `path:"eventId" format:"uuid" doc:"The event's id (a UUID)."`
}

func (h *Handlers) listRevokedTickets(ctx context.Context, in *revokedTicketsInput) (*RevokedTicketsOutput, error) {
	c, eventID, err := h.eventPath(ctx, in.EventID)
	if err != nil {
		return nil, err
	}
	revoked, err := c.Purchase.RevokedTickets(ctx, identity(ctx).OrganizerID, eventID)
	if err != nil {
		return nil, h.problemFor(ctx, err, "list revoked tickets", "No such event.")
	}
	out := &RevokedTicketsOutput{}
	out.Body.Tickets = make([]RevokedTicketBody, 0, len(revoked))
	for _, r := range revoked {
		out.Body.Tickets = append(out.Body.Tickets, RevokedTicketBody{ID: r.ID, RevokedAt: r.RevokedAt.UTC()})
	}
	return out, nil
}

func (h *Handlers) getTicketSigningKey(context.Context, *struct{}) (*TicketSigningKeyOutput, error) {
	if len(h.cfg.TicketPublicKey) == 0 {
		return nil, problem(http.StatusNotFound, TypeNotFound, "Tickets are not signed by this deployment.")
	}
	return &TicketSigningKeyOutput{
		CacheControl: "public, max-age=300",
		Body: TicketSigningKeyBody{
			Algorithm: "Ed25519",
			PublicKey: base64.StdEncoding.EncodeToString(h.cfg.TicketPublicKey),
		},
	}, nil
}
