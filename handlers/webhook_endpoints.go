package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/domain/cells"
	"boxoffice/domain/webhooks"
	"boxoffice/platform/db"
)

// WebhookEndpointBody is an endpoint as reads return it: never its
// secret.
type WebhookEndpointBody struct {
	ID                  uuid.UUID                 `json:"id"`
	URL                 string                    `json:"url"`
	Description         string                    `json:"description"`
	EventTypes          []string                  `json:"eventTypes" doc:"Public event types and notices delivered; empty means every event type (notices only when named)."`
	Enabled             bool                      `json:"enabled"`
	DisabledReason      string                    `json:"disabledReason,omitempty" enum:"user,gone,failing" doc:"Why the endpoint is disabled: by you, the receiver answered 410, or it failed consistently for days."`
	RateLimitPerSecond  *int32                    `json:"rateLimitPerSecond,omitempty" doc:"Deliveries per second; absent is unlimited."`
	MaxConcurrency      int32                     `json:"maxConcurrency" doc:"Attempts in flight at once."`
	PayloadVersion      int                       `json:"payloadVersion" enum:"1,2" doc:"How the messages sent to it spell their fields: 1 snake_case (order_id), 2 camelCase (orderId), as this API does. Endpoints created before version 2 existed have 1."`
	CircuitState        string                    `json:"circuitState" enum:"closed,open,half_open" doc:"open: nothing is sent for a while after sustained failure; half_open: one probe at a time."`
	ConsecutiveFailures int32                     `json:"consecutiveFailures"`
	FailingSince        *time.Time                `json:"failingSince,omitempty" doc:"First failure since the last success."`
	Health              WebhookEndpointHealthBody `json:"health"`
	CreatedAt           time.Time                 `json:"createdAt"`
	UpdatedAt           time.Time                 `json:"updatedAt"`
}

// WebhookEndpointHealthBody is how deliveries to an endpoint are going.
type WebhookEndpointHealthBody struct {
	LastSuccessAt    *time.Time `json:"lastSuccessAt,omitempty" doc:"When a delivery to it last succeeded, to within 10 seconds; absent before the first."`
	FailureStreak    int32      `json:"failureStreak" doc:"Retryable failures since the last success; 10 in a row open the breaker."`
	FailingSince     *time.Time `json:"failingSince,omitempty" doc:"First failure since the last success; failing 5 days (unless the deployment says otherwise) disables the endpoint."`
	Breaker          string     `json:"breaker" enum:"closed,open,half_open" doc:"The circuit breaker: closed (sending), open (nothing is sent until breakerOpenUntil), half_open (one probe at a time; a success closes it)."`
	BreakerOpenUntil *time.Time `json:"breakerOpenUntil,omitempty" doc:"When an open breaker lets a probe through."`
	DisabledAt       *time.Time `json:"disabledAt,omitempty" doc:"When the endpoint was disabled; absent while enabled."`
	DisabledReason   string     `json:"disabledReason,omitempty" enum:"user,gone,failing" doc:"Why: by you, the receiver answered 410, or it failed consistently for days. The last two also send an endpoint.disabled notice to your other endpoints that subscribe to it."`
}

// WebhookEndpointSecretBody is an endpoint with its signing secret: only
// the answers of create and rotate-secret carry it, once.
type WebhookEndpointSecretBody struct {
	WebhookEndpointBody
	Secret string `json:"secret" doc:"The whsec_ signing secret. Shown only now: store it."`
}

// secretBody is the answer of an operation that shows e's secret.
func secretBody(e webhooks.Endpoint, err error) (WebhookEndpointSecretBody, error) {
	return WebhookEndpointSecretBody{WebhookEndpointBody: webhookEndpointBody(e), Secret: e.Secret}, err
}

func webhookEndpointBody(e webhooks.Endpoint) WebhookEndpointBody {
	b := WebhookEndpointBody{
		ID: e.ID, URL: e.URL, Description: e.Description, EventTypes: e.EventTypes, Enabled: e.Enabled,
		DisabledReason: e.DisabledReason, RateLimitPerSecond: e.RateLimitPerSecond, MaxConcurrency: e.MaxConcurrency,
		PayloadVersion: e.PayloadVersion,
		CircuitState:   e.CircuitState, ConsecutiveFailures: e.ConsecutiveFailures, FailingSince: db.UTC(e.FailingSince),
		Health: WebhookEndpointHealthBody{
			LastSuccessAt: db.UTC(e.LastSuccessAt), FailureStreak: e.ConsecutiveFailures, FailingSince: db.UTC(e.FailingSince),
			Breaker: e.CircuitState, DisabledAt: db.UTC(e.DisabledAt), DisabledReason: e.DisabledReason,
		},
		CreatedAt: e.CreatedAt.UTC(), UpdatedAt: e.UpdatedAt.UTC(),
	}
	if e.CircuitState == "open" {
		b.Health.BreakerOpenUntil = db.UTC(e.CircuitOpenUntil)
	}
	return b
}

// CreateWebhookEndpointInput creates an endpoint.
type CreateWebhookEndpointInput struct {
	IdempotencyKeyHeader
	Body struct {
		URL                string   `json:"url" minLength:"1" maxLength:"2048" example:"https://hooks.example.com/boxoffice" doc:"https URL that resolves to public addresses only."`
		Description        string   `json:"description,omitempty" maxLength:"500"`
		EventTypes         []string `json:"eventTypes,omitempty" maxItems:"20" doc:"Any of order.confirmed, order.paid, ticket.issued, order.failed, order.canceled, order.refunded, order.partially_refunded, hold.expired, waitlist.offered, and the notices endpoint.disabled, delivery.exhausted and delivery.needs_review (about your other endpoints); empty means every event type, without the notices, which are sent only to endpoints that name them."`
		Enabled            *bool    `json:"enabled,omitempty" doc:"Defaults to true."`
		RateLimitPerSecond *int32   `json:"rateLimitPerSecond,omitempty" minimum:"1" maximum:"10000" doc:"Deliveries per second; absent is unlimited."`
		MaxConcurrency     int32    `json:"maxConcurrency,omitempty" minimum:"1" maximum:"1000" doc:"Attempts in flight at once. Defaults to 10."`
		PayloadVersion     int      `json:"payloadVersion,omitempty" enum:"1,2" doc:"How messages spell their fields: 2 camelCase (orderId), as this API does; 1 snake_case (order_id), the default in API version 1 (2 becomes the default in version 2)."`
	}
}

// WebhookEndpointSecretOutput is an endpoint with its secret.
type WebhookEndpointSecretOutput struct {
	Location string `header:"Location"`
	Body     WebhookEndpointSecretBody
}

// WebhookEndpointOutput is an endpoint.
type WebhookEndpointOutput struct {
	Body WebhookEndpointBody
}

// WebhookEndpointPathInput names an endpoint.
type WebhookEndpointPathInput struct {
	EndpointID string `path:"endpointId" format:"uuid" doc:"Endpoint id (UUID)."`
}

// TestWebhookEndpointInput names the endpoint to send a test to.
type TestWebhookEndpointInput struct {
	WebhookEndpointPathInput
	IdempotencyKeyHeader
}

// RotateWebhookSecretInput names the endpoint whose secret to rotate.
type RotateWebhookSecretInput struct {
	WebhookEndpointPathInput
	IdempotencyKeyHeader
}

// ListWebhookEndpointsInput pages through endpoints.
type ListWebhookEndpointsInput struct {
	PageInput
}

// ListWebhookEndpointsOutput is a page of endpoints, oldest first.
type ListWebhookEndpointsOutput struct {
	Body struct {
		Endpoints []WebhookEndpointBody `json:"endpoints"`
		PageOutput
	}
}

// UpdateWebhookEndpointInput changes an endpoint; absent fields stay.
type UpdateWebhookEndpointInput struct {
	WebhookEndpointPathInput
	Body struct {
		URL                *string   `json:"url,omitempty" minLength:"1" maxLength:"2048"`
		Description        *string   `json:"description,omitempty" maxLength:"500"`
		EventTypes         *[]string `json:"eventTypes,omitempty" maxItems:"20" doc:"Replaces the filter; [] means every event type (notices only when named)."`
		Enabled            *bool     `json:"enabled,omitempty" doc:"false stops deliveries (kept for recover); true clears the failure record and circuit."`
		RateLimitPerSecond *int32    `json:"rateLimitPerSecond,omitempty" minimum:"0" maximum:"10000" doc:"Deliveries per second; 0 removes the limit."`
		MaxConcurrency     *int32    `json:"maxConcurrency,omitempty" minimum:"1" maximum:"1000"`
		PayloadVersion     *int      `json:"payloadVersion,omitempty" enum:"1,2" doc:"Moves the endpoint to another payload version; messages not yet sent, replays and recovers go out in it."`
	}
}

// RecoverWebhookEndpointInput re-sends what failed, or needs review, in a
// time window.
type RecoverWebhookEndpointInput struct {
	IdempotencyKeyHeader
	WebhookEndpointPathInput
	Body struct {
		Since  time.Time  `json:"since" doc:"Failed, dead and needs_review deliveries of messages since then are sent again."`
		Until  *time.Time `json:"until,omitempty" doc:"Only deliveries of messages before then (after since). Absent: up to now."`
		Reason string     `json:"reason,omitempty" maxLength:"500" doc:"Why you recover: stored with who asked, for the record."`
	}
}

// TestWebhookEndpointOutput is the webhook.test message queued.
type TestWebhookEndpointOutput struct {
	Body WebhookMessageBody
}

// QueuedOutput says how many deliveries were queued.
type QueuedOutput struct {
	Body struct {
		Queued int64 `json:"queued" doc:"Deliveries queued."`
	}
}

// webhookError is the problem of the webhooks package's err
// (problemFor): a missing endpoint, message or attempt is a 404.
func (h *Handlers) webhookError(ctx context.Context, msg string, err error) error {
	return h.problemFor(ctx, err, msg, "No such webhook resource.")
}

// requestedBy names the caller for the record of a replay or recover:
// the API key it presented, or the user of its token.
func requestedBy(ctx context.Context) string {
	id := identity(ctx)
	if id.APIKeyID != uuid.Nil {
		return "api_key:" + id.APIKeyID.String()
	}
	return "user:" + id.UserID.String()
}

// webhooksCell returns the calling organizer's cell, whose Webhooks is
// then not nil, or the 503 of a cell that does not answer, or the 404 of
// a server that has no webhooks configured.
func (h *Handlers) webhooksCell(ctx context.Context) (*cells.Cell, error) {
	c, err := h.organizerCell(ctx)
	if err != nil {
		return nil, err
	}
	if c.Webhooks == nil {
		return nil, problem(http.StatusNotFound, TypeNotFound, "Webhooks are not available on this server.")
	}
	return c, nil
}

// webhookOf is what every operation on one endpoint or message starts
// from: the caller's cell with its webhooks service (webhooksCell's 503
// or 404 first), then the id that parse reads from the path (its 422).
func (h *Handlers) webhookOf(ctx context.Context, raw string, parse func(string) (uuid.UUID, error)) (*cells.Cell, uuid.UUID, error) {
	c, err := h.webhooksCell(ctx)
	if err != nil {
		return nil, uuid.Nil, err
	}
	id, err := parse(raw)
	if err != nil {
		return nil, uuid.Nil, err
	}
	return c, id, nil
}

// endpointOf is webhookOf for an operation on one endpoint.
func (h *Handlers) endpointOf(ctx context.Context, endpointID string) (*cells.Cell, uuid.UUID, error) {
	return h.webhookOf(ctx, endpointID, func(s string) (uuid.UUID, error) { return parseUUID(s, "path.endpointId") })
}

func (h *Handlers) createWebhookEndpoint(ctx context.Context, in *CreateWebhookEndpointInput) (*WebhookEndpointSecretOutput, error) {
	c, err := h.webhooksCell(ctx)
	if err != nil {
		return nil, err
	}
	svc := c.Webhooks
	p := webhooks.EndpointParams{
		URL: in.Body.URL, Description: in.Body.Description, EventTypes: in.Body.EventTypes,
		RateLimitPerSecond: in.Body.RateLimitPerSecond, MaxConcurrency: in.Body.MaxConcurrency,
		PayloadVersion: in.Body.PayloadVersion,
		Disabled:       in.Body.Enabled != nil && !*in.Body.Enabled,
	}
	body, _, err := idempotently(ctx, c, idempotentRequest{op: "create-webhook-endpoint", key: in.IdempotencyKey, parts: []any{in.Body}, secret: true},
		func(ctx context.Context, tx pgx.Tx) (WebhookEndpointSecretBody, error) {
			return secretBody(svc.CreateTx(ctx, tx, identity(ctx).OrganizerID, p))
		},
		func(ctx context.Context) (WebhookEndpointSecretBody, error) {
			return secretBody(svc.Create(ctx, identity(ctx).OrganizerID, p))
		})
	switch {
	case errors.Is(err, webhooks.ErrEndpointLimit):
		return nil, problem(http.StatusConflict, TypeEndpointLimit,
			fmt.Sprintf("You have %d webhook endpoints, the most allowed; delete one first.", svc.MaxEndpoints()))
	case err != nil:
		return nil, h.webhookError(ctx, "create webhook endpoint", err)
	}
	return &WebhookEndpointSecretOutput{Location: "/v1/webhook-endpoints/" + body.ID.String(), Body: body}, nil
}

func (h *Handlers) listWebhookEndpoints(ctx context.Context, in *ListWebhookEndpointsInput) (*ListWebhookEndpointsOutput, error) {
	c, err := h.webhooksCell(ctx)
	if err != nil {
		return nil, err
	}
	svc := c.Webhooks
	after, limit, err := in.read()
	if err != nil {
		return nil, err
	}
	es, err := svc.List(ctx, identity(ctx).OrganizerID, after, limit)
	if err != nil {
		return nil, h.webhookError(ctx, "list webhook endpoints", err)
	}
	out := &ListWebhookEndpointsOutput{}
	out.Body.Endpoints, out.Body.PageOutput = listPage(es, limit, webhookEndpointBody)
	return out, nil
}

func (h *Handlers) getWebhookEndpoint(ctx context.Context, in *WebhookEndpointPathInput) (*WebhookEndpointOutput, error) {
	c, id, err := h.endpointOf(ctx, in.EndpointID)
	if err != nil {
		return nil, err
	}
	svc := c.Webhooks
	e, err := svc.Get(ctx, identity(ctx).OrganizerID, id)
	if err != nil {
		return nil, h.webhookError(ctx, "get webhook endpoint", err)
	}
	return &WebhookEndpointOutput{Body: webhookEndpointBody(e)}, nil
}

func (h *Handlers) updateWebhookEndpoint(ctx context.Context, in *UpdateWebhookEndpointInput) (*WebhookEndpointOutput, error) {
	c, id, err := h.endpointOf(ctx, in.EndpointID)
	if err != nil {
		return nil, err
	}
	svc := c.Webhooks
	b := in.Body
	u := webhooks.EndpointUpdate{
		URL: b.URL, Description: b.Description, EventTypes: b.EventTypes, Enabled: b.Enabled, MaxConcurrency: b.MaxConcurrency,
		PayloadVersion: b.PayloadVersion,
	}
	if b.RateLimitPerSecond != nil {
		u.SetRateLimit = true
		if *b.RateLimitPerSecond > 0 {
			u.RateLimitPerSecond = b.RateLimitPerSecond
		}
	}
	e, err := svc.Update(ctx, identity(ctx).OrganizerID, id, u)
	if err != nil {
		return nil, h.webhookError(ctx, "update webhook endpoint", err)
	}
	return &WebhookEndpointOutput{Body: webhookEndpointBody(e)}, nil
}

func (h *Handlers) deleteWebhookEndpoint(ctx context.Context, in *WebhookEndpointPathInput) (*struct{}, error) {
	c, id, err := h.endpointOf(ctx, in.EndpointID)
	if err != nil {
		return nil, err
	}
	svc := c.Webhooks
	if err := svc.Delete(ctx, identity(ctx).OrganizerID, id); err != nil {
		return nil, h.webhookError(ctx, "delete webhook endpoint", err)
	}
	return &struct{}{}, nil
}

func (h *Handlers) rotateWebhookSecret(ctx context.Context, in *RotateWebhookSecretInput) (*WebhookEndpointSecretOutput, error) {
	c, id, err := h.endpointOf(ctx, in.EndpointID)
	if err != nil {
		return nil, err
	}
	svc := c.Webhooks
	body, _, err := idempotently(ctx, c, idempotentRequest{op: "rotate-webhook-secret", key: in.IdempotencyKey, parts: []any{id}, secret: true},
		func(ctx context.Context, tx pgx.Tx) (WebhookEndpointSecretBody, error) {
			return secretBody(svc.RotateSecretTx(ctx, tx, identity(ctx).OrganizerID, id))
		},
		func(ctx context.Context) (WebhookEndpointSecretBody, error) {
			return secretBody(svc.RotateSecret(ctx, identity(ctx).OrganizerID, id))
		})
	if err != nil {
		return nil, h.webhookError(ctx, "rotate webhook secret", err)
	}
	return &WebhookEndpointSecretOutput{Location: "/v1/webhook-endpoints/" + body.ID.String(), Body: body}, nil
}

func (h *Handlers) recoverWebhookEndpoint(ctx context.Context, in *RecoverWebhookEndpointInput) (*QueuedOutput, error) {
	c, id, err := h.endpointOf(ctx, in.EndpointID)
	if err != nil {
		return nil, err
	}
	svc := c.Webhooks
	if in.Body.Until != nil && !in.Body.Until.After(in.Body.Since) {
		return nil, invalid("body.until", "expected a time after since")
	}
	org := identity(ctx).OrganizerID
	p := webhooks.RecoverParams{Since: in.Body.Since, Until: in.Body.Until,
		RedeliveryRequest: webhooks.RedeliveryRequest{RequestedBy: requestedBy(ctx), Reason: in.Body.Reason}}
	n, _, err := idempotently(ctx, c, idempotentRequest{op: "recover-webhook-endpoint", key: in.IdempotencyKey, parts: []any{id, in.Body}},
		func(ctx context.Context, tx pgx.Tx) (int64, error) {
			return svc.RecoverTx(ctx, tx, org, id, p)
		},
		func(ctx context.Context) (int64, error) { return svc.Recover(ctx, org, id, p) })
	if err != nil {
		return nil, h.webhookError(ctx, "recover webhook endpoint", err)
	}
	out := &QueuedOutput{}
	out.Body.Queued = n
	return out, nil
}

func (h *Handlers) testWebhookEndpoint(ctx context.Context, in *TestWebhookEndpointInput) (*TestWebhookEndpointOutput, error) {
	c, id, err := h.endpointOf(ctx, in.EndpointID)
	if err != nil {
		return nil, err
	}
	svc := c.Webhooks
	org := identity(ctx).OrganizerID
	body, _, err := idempotently(ctx, c, idempotentRequest{op: "test-webhook-endpoint", key: in.IdempotencyKey, parts: []any{id}},
		func(ctx context.Context, tx pgx.Tx) (WebhookMessageBody, error) {
			m, err := svc.SendTestTx(ctx, tx, org, id)
			return webhookMessageBody(m), err
		},
		func(ctx context.Context) (WebhookMessageBody, error) {
			m, err := svc.SendTest(ctx, org, id)
			return webhookMessageBody(m), err
		})
	if err != nil {
		return nil, h.webhookError(ctx, "test webhook endpoint", err)
	}
	return &TestWebhookEndpointOutput{Body: body}, nil
}
