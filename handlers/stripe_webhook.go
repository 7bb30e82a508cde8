package handlers

import (
	"context"
	"errors"
	"net/http"

	"github.com/stripe/stripe-go/v79"

	"boxoffice/domain/cells"
	"boxoffice/domain/payments"
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

func (h *Handlers) receiveStripeWebhook(ctx context.Context, in *StripeWebhookInput) (*StripeWebhookOutput, error) {
	// Every cell's ingress holds the deployment's one webhook secret: the
	// first verifies, and only a verified event is read to route it.
	first := h.cells.Cells()[0]
	if first.Ingress == nil {
		return nil, problem(http.StatusNotFound, TypeNotFound, "This deployment receives no Stripe webhooks (STRIPE_WEBHOOK_SECRET is not set).")
	}
	ev, err := first.Ingress.Verify(in.RawBody, in.Signature)
	if err != nil {
		return nil, h.stripeWebhookProblem(ctx, err)
	}
	c, err := h.stripeWebhookCell(ctx, ev)
	if err != nil {
		return nil, err
	}
	r, err := c.Ingress.Apply(ctx, ev)
	if err != nil {
		return nil, h.stripeWebhookProblem(ctx, err)
	}
	h.logger.InfoContext(ctx, "stripe webhook received", "correlation_id", CorrelationID(ctx),
		"provider_event_type", r.EventType, "duplicate", r.Duplicate, "domain_event", r.DomainEvent)
	out := &StripeWebhookOutput{}
	out.Body.Received = true
	return out, nil
}

// stripeWebhookProblem is the problem of a refused provider event
// (problemFor), after logging why a signed or unsigned one was refused.
func (h *Handlers) stripeWebhookProblem(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, payments.ErrBadSignature):
		h.logger.WarnContext(ctx, "stripe webhook signature rejected", "correlation_id", CorrelationID(ctx))
	case errors.Is(err, payments.ErrInvalidEvent):
		h.logger.WarnContext(ctx, "signed stripe webhook refused: malformed ids", "correlation_id", CorrelationID(ctx), "error", err.Error())
	}
	return h.problemFor(ctx, err, "receive stripe webhook", "")
}

// stripeWebhookCell returns the cell of the order a verified provider
// event is about. Every intent, and the charge and refund of one, carries
// its order's id in metadata["order_id"]; an event that names no order
// goes to the first cell, which records and ignores it.
func (h *Handlers) stripeWebhookCell(ctx context.Context, ev stripe.Event) (*cells.Cell, error) {
	first := h.cells.Cells()[0]
	if len(h.cells.Cells()) == 1 {
		return first, nil
	}
	orderID, ok := payments.OrderOfEvent(ev)
	if !ok {
		return first, nil
	}
	c, err := h.cells.ForOrder(ctx, orderID)
	if errors.Is(err, cells.ErrNotFound) {
		return first, nil
	}
	if err == nil && c.Ingress == nil {
		return first, nil
	}
	return c, h.cellProblem(ctx, err, "", "order_id", orderID)
}
