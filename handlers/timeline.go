package handlers

import (
	"context"
	"time"

	"github.com/google/uuid"

	"boxoffice/domain/timeline"
)

// TimelineFactBody is one fact of an order's story.
type TimelineFactBody struct {
	At   time.Time `json:"at" doc:"When it happened, by the clock of whoever recorded it (the API's, a worker's or the database's)."`
	Kind string    `json:"kind" enum:"order.created,order.status,hold.created,event,event.applied,payment.created,payment.status,payment.declined,provider.webhook,provider.webhook.duplicate,ticket.issued,ticket.revoked,ticket.checked_in,refund.requested,refund.succeeded,webhook.message,webhook.delivery,webhook.attempt" doc:"What the fact is: the order created or its status now; the hold; an event written for the order (event) or a consumer applying it (event.applied); the payment at the provider, its status now, and declined attempts; a webhook from the payment provider received, or delivered again and ignored (provider.webhook.duplicate); a ticket issued, revoked by a refund, or checked in; a refund of selected tickets requested or confirmed; a webhook message to you, its delivery to one of your endpoints, and each attempt of it."`
	ID   string    `json:"id" doc:"What the fact is about: the event id (for event and event.applied), the provider's event id, the PaymentIntent id, or the id of the order, hold, ticket, refund, webhook message or delivery (for webhook.attempt, its delivery's)."`
	Type string    `json:"type,omitempty" doc:"The event's type (PaymentCaptured), the provider event's type, the webhook message's type (order.paid), or a status (of the order, hold, payment, refund or delivery); for webhook.attempt, its error class (empty when it succeeded)."`
	// CausationID is what caused an event.
	CausationID string `json:"causationId,omitempty" doc:"For an event: the id of the event it reacts to, or the provider's event (stripe:evt_…) it records."`
	Consumer    string `json:"consumer,omitempty" doc:"For event.applied: the consumer that applied the event (purchase_saga, payments, tickets, webhooks_fanout)."`
	Count       int    `json:"count,omitempty" doc:"The seats of a hold, the declined attempts, the ignored deliveries of a provider webhook, the tickets of a refund, a delivery's attempts or an attempt's number."`
	Detail      string `json:"detail,omitempty" doc:"The rest, for people: amounts, seats, status codes, latencies. Never a secret, a token or a body."`
}

// TimelineBody is one order's story.
type TimelineBody struct {
	OrderID       uuid.UUID          `json:"orderId"`
	EventID       uuid.UUID          `json:"eventId"`
	Status        string             `json:"status" enum:"pending_payment,authorized,capture_pending,paid,ticketed,failed,canceled,refunding,refunded"`
	CorrelationID string             `json:"correlationId" doc:"The correlation id of the request that created the order: its events and the API's and workers' logs carry it."`
	Facts         []TimelineFactBody `json:"facts" doc:"Oldest first. Facts of the same instant keep the order in which they follow from each other."`
}

// TimelineOutput is an order's story.
type TimelineOutput struct {
	Body TimelineBody
}

func (h *Handlers) getOrderTimeline(ctx context.Context, in *OrderPathInput) (*TimelineOutput, error) {
	c, orderID, err := h.orderPath(ctx, in.OrderID)
	if err != nil {
		return nil, err
	}
	t, err := timeline.ForOrganizer(ctx, c.Pool, identity(ctx).OrganizerID, orderID)
	if err != nil {
		return nil, h.problemFor(ctx, err, "get order timeline", "No such order.", "order_id", orderID)
	}
	body := TimelineBody{OrderID: t.OrderID, EventID: t.EventID, Status: t.Status, CorrelationID: t.CorrelationID,
		Facts: make([]TimelineFactBody, len(t.Facts))}
	for i, f := range t.Facts {
		body.Facts[i] = TimelineFactBody(f)
	}
	return &TimelineOutput{Body: body}, nil
}
