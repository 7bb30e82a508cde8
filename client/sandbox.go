package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// The sandbox payment provider's buyer actions (POST
// /v1/sandbox/payment-intents/{id}/authorize, …) exist only on a server
// run with BOXOFFICE_PAYMENTS=sandbox, so openapi.yaml, which describes
// every deployment, leaves them out and the generator makes no methods
// for them. They are written here by hand, in the generated methods'
// shape; against Stripe a buyer confirms the payment with Stripe.js.

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

// SandboxIntentBody is a PaymentIntent after a sandbox action.
type SandboxIntentBody struct {
	PaymentIntentID string `json:"paymentIntentId"`
	OrderID         string `json:"orderId"`
	// Status is the intent's status now: requires_capture once
	// authorized, requires_payment_method after a decline.
	Status string `json:"status"`
}

// SandboxPaymentIntentResponse is the answer to a sandbox action: 200
// with the intent, 404 for an intent that is not the caller's, 409 for
// one that no longer awaits a payment method.
type SandboxPaymentIntentResponse struct {
	Body         []byte
	HTTPResponse *http.Response
	JSON200      *SandboxIntentBody
}

// StatusCode is the answer's HTTP status, 0 without an answer.
func (r SandboxPaymentIntentResponse) StatusCode() int {
	if r.HTTPResponse != nil {
		return r.HTTPResponse.StatusCode
	}
	return 0
}

// SandboxPaymentIntent sends action for the PaymentIntent id (pi_…) as
// the buyer whose order it pays for, and returns the answer unread.
func (c *Client) SandboxPaymentIntent(ctx context.Context, id string, action SandboxAction, reqEditors ...RequestEditorFn) (*http.Response, error) {
	server, err := url.Parse(c.Server)
	if err != nil {
		return nil, err
	}
	u, err := server.Parse("v1/sandbox/payment-intents/" + url.PathEscape(id) + "/" + string(action))
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if err := c.applyEditors(ctx, req, reqEditors); err != nil {
		return nil, err
	}
	return c.Client.Do(req)
}

// SandboxPaymentIntentWithResponse is SandboxPaymentIntent, read and
// decoded. c must have been made by NewClientWithResponses.
func (c *ClientWithResponses) SandboxPaymentIntentWithResponse(ctx context.Context, id string, action SandboxAction, reqEditors ...RequestEditorFn) (*SandboxPaymentIntentResponse, error) {
	raw, ok := c.ClientInterface.(*Client)
	if !ok {
		return nil, fmt.Errorf("sandbox %s: a ClientWithResponses around %T, not a *Client", action, c.ClientInterface)
	}
	rsp, err := raw.SandboxPaymentIntent(ctx, id, action, reqEditors...)
	if err != nil {
		return nil, err
	}
	defer rsp.Body.Close()
	body, err := io.ReadAll(rsp.Body)
	if err != nil {
		return nil, err
	}
	res := &SandboxPaymentIntentResponse{Body: body, HTTPResponse: rsp}
	if rsp.StatusCode == http.StatusOK && strings.Contains(rsp.Header.Get("Content-Type"), "json") {
		var dest SandboxIntentBody
		if err := json.Unmarshal(body, &dest); err != nil {
			return nil, err
		}
		res.JSON200 = &dest
	}
	return res, nil
}
