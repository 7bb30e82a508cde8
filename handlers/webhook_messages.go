package handlers

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/domain/webhooks"
	"boxoffice/platform/db"
)

// WebhookMessageBody is a message as it was (and is) sent, with its
// delivery to each endpoint.
type WebhookMessageBody struct {
	ID         uuid.UUID             `json:"id"`
	WebhookID  string                `json:"webhookId" doc:"The webhook-id header of every attempt: msg_<id>."`
	Type       string                `json:"type"`
	CreatedAt  time.Time             `json:"createdAt"`
	Payload    json.RawMessage       `json:"payload" doc:"The JSON body {type, timestamp, data} as a payload-version-1 endpoint receives it, to the byte; a version-2 endpoint receives the same with every key in camelCase."`
	Deliveries []WebhookDeliveryBody `json:"deliveries" doc:"Its delivery to each endpoint it was queued for (none left for a deleted endpoint)."`
}

// WebhookDeliveryBody is one endpoint's delivery of a message.
type WebhookDeliveryBody struct {
	EndpointID    uuid.UUID  `json:"endpointId"`
	Status        string     `json:"status" enum:"succeeded,pending,failed,needs_review,dead" doc:"succeeded: the endpoint answered 2xx. pending: not attempted yet since it was queued, replayed or recovered. failed: its last attempt failed and it will be retried at nextAttemptAt. needs_review: the endpoint gave a terminal answer (a redirect, a 4xx other than 408, 410 and 429, a 501 or a 505); it is not retried until you fix the receiver and recover or replay it. dead: it will not be sent again unless you replay or recover it (its retries were used up, the endpoint answered 410, or it was disabled)."`
	Attempts      int32      `json:"attempts" doc:"Attempts made, replays included."`
	LastError     string     `json:"lastError,omitempty" doc:"The last failed attempt's error class, with its status code when an answer came."`
	NextAttemptAt *time.Time `json:"nextAttemptAt,omitempty" doc:"When a pending or failed delivery is next due."`
	UpdatedAt     time.Time  `json:"updatedAt"`
}

func webhookMessageBody(m webhooks.Message) WebhookMessageBody {
	b := WebhookMessageBody{
		ID: m.ID, WebhookID: webhooks.MessageID(m.ID), Type: m.EventType, CreatedAt: m.CreatedAt.UTC(), Payload: m.Payload,
		Deliveries: make([]WebhookDeliveryBody, len(m.Deliveries)),
	}
	for i, d := range m.Deliveries {
		b.Deliveries[i] = WebhookDeliveryBody{
			EndpointID: d.EndpointID, Status: d.Status, Attempts: d.Attempts, LastError: d.LastError,
			NextAttemptAt: db.UTC(d.NextAttemptAt), UpdatedAt: d.UpdatedAt.UTC(),
		}
	}
	return b
}

// ListWebhookMessagesInput filters and pages messages.
type ListWebhookMessagesInput struct {
	Type       string `query:"type" maxLength:"100" doc:"Only messages of this type (an event type, a notice type, or webhook.test)."`
	Status     string `query:"status" enum:"succeeded,pending,failed,needs_review,dead" doc:"Only messages with a delivery in this status (to endpointId, when given); see deliveries[].status."`
	EndpointID string `query:"endpointId" format:"uuid" doc:"Only messages with a delivery to this endpoint."`
	Since      string `query:"since" maxLength:"64" doc:"Only messages since this RFC 3339 time." example:"2026-01-01T00:00:00Z"`
	PageInput
}

// ListWebhookMessagesOutput is a page of messages, newest first.
type ListWebhookMessagesOutput struct {
	Body struct {
		Messages []WebhookMessageBody `json:"messages"`
		PageOutput
	}
}

// WebhookMessagePathInput names a message.
type WebhookMessagePathInput struct {
	MessageID string `path:"messageId" pattern:"^(msg_)?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" patternDescription:"a UUID or msg_<UUID>" doc:"Message id (UUID, or the msg_ webhook-id)."`
}

// WebhookAttemptBody is one try of a message to an endpoint.
type WebhookAttemptBody struct {
	ID           int64     `json:"id"`
	EndpointID   uuid.UUID `json:"endpointId"`
	Number       int32     `json:"number" doc:"1 for the first attempt of the delivery."`
	Trigger      string    `json:"trigger" enum:"original,retry,replay,recover" doc:"original: the first attempt; retry: an automatic retry; replay: a replay of the message; recover: a recover of the endpoint."`
	StatusCode   *int32    `json:"statusCode,omitempty" doc:"Absent when no answer came."`
	LatencyMs    int32     `json:"latencyMs"`
	ErrorClass   string    `json:"errorClass" enum:"none,timeout,connection,refused,redirect,http_408,http_429,http_5xx,http_4xx,gone,payload_too_large,secret_invalid"`
	ResponseBody string    `json:"responseBody" doc:"The first KiB of the answer."`
	CreatedAt    time.Time `json:"createdAt"`
}

// WebhookAttemptsOutput lists a message's attempts, oldest first.
type WebhookAttemptsOutput struct {
	Body struct {
		Attempts []WebhookAttemptBody `json:"attempts"`
	}
}

// ReplayWebhookMessageBody optionally names one endpoint, and why.
type ReplayWebhookMessageBody struct {
	EndpointID *uuid.UUID `json:"endpointId,omitempty" doc:"Replay to this endpoint only (it need not have had the message). Absent: every enabled endpoint that had it."`
	Reason     string     `json:"reason,omitempty" maxLength:"500" doc:"Why you replay: stored with who asked, for the record."`
}

// ReplayWebhookMessageInput replays a message.
type ReplayWebhookMessageInput struct {
	IdempotencyKeyHeader
	WebhookMessagePathInput
	Body *ReplayWebhookMessageBody
}

func (h *Handlers) listWebhookMessages(ctx context.Context, in *ListWebhookMessagesInput) (*ListWebhookMessagesOutput, error) {
	c, err := h.webhooksCell(ctx)
	if err != nil {
		return nil, err
	}
	svc := c.Webhooks
	f := webhooks.MessageFilter{EventType: in.Type}
	if in.Type != "" && !webhooks.IsMessageType(in.Type) {
		return nil, invalid("query.type", "unknown event type")
	}
	f.Status = in.Status
	if in.EndpointID != "" {
		id, err := parseUUID(in.EndpointID, "query.endpointId")
		if err != nil {
			return nil, err
		}
		f.EndpointID = &id
	}
	if in.Since != "" {
		if f.Since, err = time.Parse(time.RFC3339Nano, in.Since); err != nil {
			return nil, invalid("query.since", "expected an RFC 3339 time")
		}
	}
	if f.Before, f.Limit, err = in.read(); err != nil {
		return nil, err
	}
	ms, err := svc.Messages(ctx, identity(ctx).OrganizerID, f)
	if err != nil {
		return nil, h.webhookError(ctx, "list webhook messages", err)
	}
	out := &ListWebhookMessagesOutput{}
	out.Body.Messages, out.Body.PageOutput = listPage(ms, f.Limit, webhookMessageBody)
	return out, nil
}

func parseMessageID(s string) (uuid.UUID, error) {
	id, err := webhooks.ParseMessageID(s)
	if err != nil {
		return uuid.Nil, invalid("path.messageId", "expected a UUID or msg_<UUID>")
	}
	return id, nil
}

func (h *Handlers) listWebhookAttempts(ctx context.Context, in *WebhookMessagePathInput) (*WebhookAttemptsOutput, error) {
	c, id, err := h.webhookOf(ctx, in.MessageID, parseMessageID)
	if err != nil {
		return nil, err
	}
	svc := c.Webhooks
	as, err := svc.Attempts(ctx, identity(ctx).OrganizerID, id)
	if err != nil {
		return nil, h.webhookError(ctx, "list webhook attempts", err)
	}
	out := &WebhookAttemptsOutput{}
	out.Body.Attempts = make([]WebhookAttemptBody, len(as))
	for i, a := range as {
		out.Body.Attempts[i] = WebhookAttemptBody{
			ID: a.ID, EndpointID: a.EndpointID, Number: a.Number, Trigger: a.Trigger, StatusCode: a.StatusCode,
			LatencyMs: a.LatencyMs, ErrorClass: a.ErrorClass, ResponseBody: a.ResponseBody, CreatedAt: a.CreatedAt.UTC(),
		}
	}
	return out, nil
}

func (h *Handlers) replayWebhookMessage(ctx context.Context, in *ReplayWebhookMessageInput) (*QueuedOutput, error) {
	c, id, err := h.webhookOf(ctx, in.MessageID, parseMessageID)
	if err != nil {
		return nil, err
	}
	svc := c.Webhooks
	var endpoint *uuid.UUID
	p := webhooks.ReplayParams{RedeliveryRequest: webhooks.RedeliveryRequest{RequestedBy: requestedBy(ctx)}}
	if in.Body != nil {
		endpoint = in.Body.EndpointID
		p.EndpointID, p.Reason = in.Body.EndpointID, in.Body.Reason
	}
	org := identity(ctx).OrganizerID
	n, _, err := idempotently(ctx, c, idempotentRequest{op: "replay-webhook-message", key: in.IdempotencyKey, parts: []any{id, endpoint, p.Reason}},
		func(ctx context.Context, tx pgx.Tx) (int64, error) { return svc.ReplayTx(ctx, tx, org, id, p) },
		func(ctx context.Context) (int64, error) { return svc.Replay(ctx, org, id, p) })
	if err != nil {
		return nil, h.webhookError(ctx, "replay webhook message", err)
	}
	out := &QueuedOutput{}
	out.Body.Queued = n
	return out, nil
}
