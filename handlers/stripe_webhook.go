package handlers

import (
	"context"
	"errors"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"boxoffice/payments"
)

// StripeWebhookInput is a webhook from the payment provider: the raw bytes,
// because the signature covers them exactly.
type StripeWebhookInput struct {
	Signature string `header:"Stripe-Signature" required:"true" doc:"t=<unix>,v1=<hex HMAC-SHA256 of t.body>"`
	RawBody   []byte `contentType:"application/json"`
}

// StripeWebhookOutput acknowledges a stored webhook.
type StripeWebhookOutput struct {
	Body struct {
		Received bool `json:"received"`
	}
}

func (h *Handlers) registerStripeWebhook(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "receive-stripe-webhook", Method: http.MethodPost, Path: "/v1/webhooks/stripe",
		Summary: "Receive a Stripe webhook",
		Description: "For Stripe. The signature is verified over the raw body before anything is parsed; " +
			"the event is stored with its effect before the 200, so anything not stored is retried by Stripe.",
		Tags: []string{"Payments"}, MaxBodyBytes: 256 << 10,
		// The bytes are the signed message: nothing may look at them first.
		SkipValidateBody: true,
		Errors:           []int{http.StatusBadRequest, http.StatusNotFound},
	}, h.receiveStripeWebhook)
}

func (h *Handlers) receiveStripeWebhook(ctx context.Context, in *StripeWebhookInput) (*StripeWebhookOutput, error) {
	if h.cfg.StripeIngress == nil {
		return nil, problem(http.StatusNotFound, TypeNotFound, "This deployment receives no Stripe webhooks (STRIPE_WEBHOOK_SECRET is not set).")
	}
	r, err := h.cfg.StripeIngress.Receive(ctx, in.RawBody, in.Signature)
	switch {
	case errors.Is(err, payments.ErrBadSignature):
		h.logger.WarnContext(ctx, "stripe webhook signature rejected", "correlation_id", CorrelationID(ctx))
		return nil, problem(http.StatusBadRequest, TypeMalformed, "The Stripe-Signature does not verify.")
	case err != nil:
		return nil, h.internal(ctx, "receive stripe webhook", err)
	}
	h.logger.InfoContext(ctx, "stripe webhook received", "correlation_id", CorrelationID(ctx),
		"provider_event_type", r.EventType, "duplicate", r.Duplicate, "domain_event", r.DomainEvent)
	out := &StripeWebhookOutput{}
	out.Body.Received = true
	return out, nil
}
