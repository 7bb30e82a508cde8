package client

import (
	"context"
	"fmt"
	"net/http"
)

// The sandbox payment provider's buyer actions (POST
// /v1/sandbox/payment-intents/{id}/authorize, decline, challenge) are in
// openapi.yaml under the Sandbox tag, marked x-test-mode-only: a server
// run with BOXOFFICE_PAYMENTS=sandbox serves them, one that talks to
// Stripe answers 404 (there a buyer confirms the payment with Stripe.js).
// The generator makes one method per action
// (SandboxAuthorizePaymentIntentWithResponse, …); SandboxPaymentIntent
// picks one by a value, for callers that choose the action at run time.

// SandboxAction is what the buyer does with a PaymentIntent in the
// sandbox.
type SandboxAction string

// The sandbox's buyer actions.
const (
	// SandboxAuthorize pays with an approved card.
	SandboxAuthorize SandboxAction = "authorize"
	// SandboxDecline has the card declined; the order keeps awaiting
	// payment while attempts are left.
	SandboxDecline SandboxAction = "decline"
	// SandboxChallenge asks for 3-D Secure; authorize or decline answers it.
	SandboxChallenge SandboxAction = "challenge"
)

// SandboxPaymentIntentResponse is the answer to a sandbox action: 200
// with the intent, 404 for an intent that is not the caller's (or on a
// server without the sandbox), 409 for one that no longer awaits a
// payment method.
type SandboxPaymentIntentResponse struct {
	Body         []byte
	HTTPResponse *http.Response
	// JSON200 is the intent after the action, on 200.
	JSON200 *SandboxIntentBody
}

// StatusCode is the answer's HTTP status, 0 without an answer.
func (r SandboxPaymentIntentResponse) StatusCode() int {
	if r.HTTPResponse != nil {
		return r.HTTPResponse.StatusCode
	}
	return 0
}

// SandboxPaymentIntentWithResponse sends action for the PaymentIntent id
// (pi_…) as the buyer whose order it pays for, through the generated
// method of that action.
func (c *ClientWithResponses) SandboxPaymentIntentWithResponse(ctx context.Context, id string, action SandboxAction, reqEditors ...RequestEditorFn) (*SandboxPaymentIntentResponse, error) {
	var (
		body []byte
		raw  *http.Response
		json *SandboxIntentBody
	)
	switch action {
	case SandboxAuthorize:
		r, err := c.SandboxAuthorizePaymentIntentWithResponse(ctx, id, reqEditors...)
		if err != nil {
			return nil, err
		}
		body, raw, json = r.Body, r.HTTPResponse, r.JSON200
	case SandboxDecline:
		r, err := c.SandboxDeclinePaymentIntentWithResponse(ctx, id, reqEditors...)
		if err != nil {
			return nil, err
		}
		body, raw, json = r.Body, r.HTTPResponse, r.JSON200
	case SandboxChallenge:
		r, err := c.SandboxChallengePaymentIntentWithResponse(ctx, id, reqEditors...)
		if err != nil {
			return nil, err
		}
		body, raw, json = r.Body, r.HTTPResponse, r.JSON200
	default:
		return nil, fmt.Errorf("sandbox: unknown action %q", action)
	}
	return &SandboxPaymentIntentResponse{Body: body, HTTPResponse: raw, JSON200: json}, nil
}
