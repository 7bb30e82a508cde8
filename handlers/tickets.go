package handlers

import (
	"context"
	"encoding/base64"
	"net/http"
	"time"

	"github.com/google/uuid"
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
	EventPathInput
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
