package handlers

import (
	"context"
	"encoding/base64"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
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
	huma.Register(api, huma.Operation{
		OperationID: "get-ticket-signing-key", Method: http.MethodGet, Path: "/v1/ticket-signing-key",
		Summary: "Get the public key that signs tickets", Tags: []string{"Tickets"},
		Description: "A ticket's QR code holds `BX1.<body>.<signature>`, both parts unpadded base64url: body is the " +
			"ticket id, order id, seat id and event id (16 bytes each) and the issue time (8 bytes, big-endian unix " +
			"seconds); signature is the Ed25519 signature of the ASCII text `BX1.<body>`. A scanner that keeps " +
			"this key verifies tickets offline. Public; no authentication.",
		Errors: []int{http.StatusNotFound},
	}, h.getTicketSigningKey)
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
