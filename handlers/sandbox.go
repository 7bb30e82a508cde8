package handlers

import (
	"context"
	"net/http"

	"github.com/google/uuid"

	"boxoffice/domain/cells"
	"boxoffice/domain/payments"
	"boxoffice/domain/payments/sandbox"
)

// SandboxIntentInput names a PaymentIntent of the sandbox provider.
type SandboxIntentInput struct {
	IntentID string `path:"id" minLength:"4" maxLength:"255" pattern:"^pi_[A-Za-z0-9_]+$" patternDescription:"a PaymentIntent id (pi_…)" doc:"PaymentIntent id (pi_…), as GET /v1/orders/{orderId} shows it." example:"pi_3MtwBwLkdIwHu7ix28a3tqPa"`
}

// SandboxIntentBody is a PaymentIntent after a buyer's action.
type SandboxIntentBody struct {
	PaymentIntentID string    `json:"paymentIntentId" doc:"The PaymentIntent."`
	OrderID         uuid.UUID `json:"orderId" doc:"The order it pays for."`
	Status          string    `json:"status" doc:"Its status now: requires_capture once authorized, requires_payment_method after a decline." example:"requires_capture"`
}

// SandboxIntentOutput is the response of a sandbox buyer action.
type SandboxIntentOutput struct {
	Body SandboxIntentBody
}

// sandboxOnly is said in every sandbox operation's description.
const sandboxOnly = "Stands in for the buyer confirming the payment in the browser (Stripe.js), which the sandbox " +
	"payment provider has no page for. It exists only when the server runs with the sandbox provider " +
	"(BOXOFFICE_PAYMENTS=sandbox) and never when it talks to Stripe. " +
	"Only the owner of the intent's order may call it; for anyone else the intent does not exist (404). " +
	"409 when the intent no longer awaits a payment method (authorized, captured or canceled already)."

// testModeOnly is the extension that marks an operation served only in
// test mode (the sandbox payment provider): a client generated from
// openapi.yaml can call it, and a reader or a tool can tell it from the
// production contract (docs/versioning.md).
const testModeOnly = "x-test-mode-only"

// sandboxActions are the buyer's actions the sandbox stands in for, in
// the order they are registered: each is an operation that differs from
// the others only in these.
var sandboxActions = []struct {
	action, summary, description string
	act                          func(*sandbox.Sandbox, context.Context, string) (payments.Intent, error)
}{
	{
		action: "authorize", summary: "Authorize a payment with an approved card (sandbox only)",
		description: "The intent moves to requires_capture and the sandbox sends a Stripe-format, " +
			"signed payment_intent.amount_capturable_updated webhook to this deployment's /v1/webhooks/stripe, " +
			"which authorizes the order's payment.",
		act: (*sandbox.Sandbox).Authorize,
	},
	{
		action: "decline", summary: "Decline a payment's card (sandbox only)",
		description: "The card is declined (card_declined, generic_decline): the intent stays in " +
			"requires_payment_method and the sandbox sends a Stripe-format, signed payment_intent.payment_failed " +
			"webhook to this deployment's /v1/webhooks/stripe. The order counts the decline and keeps awaiting " +
			"payment while attempts are left (authorize or decline the same intent again); the last allowed " +
			"decline fails it.",
		act: (*sandbox.Sandbox).Decline,
	},
	{
		action: "challenge", summary: "Ask for a payment's 3-D Secure challenge (sandbox only)",
		description: "The card's issuer asks for 3-D Secure: the intent moves to requires_action and " +
			"the sandbox sends a signed payment_intent.requires_action webhook. The order's hold is then kept a " +
			"bounded grace longer should it expire during the challenge; authorize (passed) or decline (failed) the " +
			"intent to answer it.",
		act: (*sandbox.Sandbox).Challenge,
	},
}

// sandboxAction checks that the caller owns the intent's order, then has
// the sandbox perform the buyer's action, which queues its webhook.
func (h *Handlers) sandboxAction(ctx context.Context, action, intentID string,
	act func(*sandbox.Sandbox, context.Context, string) (payments.Intent, error),
) (*SandboxIntentOutput, error) {
	c, orderID, err := h.sandboxIntentOrder(ctx, intentID)
	if err != nil {
		return nil, err
	}
	intent, err := act(c.Sandbox, ctx, intentID)
	switch code := payments.ErrorCode(err); {
	case err == nil:
	case code == payments.CodeResourceMissing:
		return nil, problem(http.StatusNotFound, TypeNotFound, "No such payment intent.")
	case code == payments.CodeUnexpectedState:
		return nil, problem(http.StatusConflict, TypeConflict, "The payment intent does not await a payment method.")
	default:
		return nil, h.internal(ctx, "sandbox "+action, err, "order_id", orderID, "payment_intent_id", intentID)
	}
	h.logger.InfoContext(ctx, "sandbox buyer action", "correlation_id", CorrelationID(ctx), "action", action,
		"order_id", orderID, "payment_intent_id", intent.ID, "status", string(intent.Status))
	return &SandboxIntentOutput{Body: SandboxIntentBody{
		PaymentIntentID: intent.ID, OrderID: orderID, Status: string(intent.Status),
	}}, nil
}

// sandboxIntentOrder returns the order the intent pays for when the caller
// owns it, and a 404 problem otherwise: the order's payments row must name
// the intent, and the order must be the caller's. One statement; an
// intent the sandbox does not have is refused by the action itself
// (CodeResourceMissing, a 404 too).
func (h *Handlers) sandboxIntentOrder(ctx context.Context, intentID string) (*cells.Cell, uuid.UUID, error) {
	notFound := problem(http.StatusNotFound, TypeNotFound, "No such payment intent.")
	// Each cell's payment worker creates intents in its own sandbox.
	c, err := h.cells.ForIntent(ctx, intentID)
	if err = h.cellProblem(ctx, err, "No such payment intent.", "payment_intent_id", intentID); err != nil {
		return nil, uuid.Nil, err
	}
	if c.Sandbox == nil {
		return nil, uuid.Nil, notFound
	}
	orderID, err := c.Purchase.IntentOrder(ctx, identity(ctx).UserID, intentID)
	if err != nil {
		return nil, uuid.Nil, h.problemFor(ctx, err, "sandbox get order", "No such payment intent.", "payment_intent_id", intentID)
	}
	return c, orderID, nil
}
