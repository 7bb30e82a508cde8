package webhooks

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/platform/db"
	"boxoffice/sqlcgen"
)

// noticeExhausted stores, in the flush transaction that records r's
// delivery dead with its retries used up, a delivery.exhausted notice to
// the organizer's other endpoints that subscribe to it. A delivery of a
// notice or a test makes none (no notice about a notice: no storm of
// them). The source key (delivery and attempt number) makes it one notice
// per exhaustion, however often the batch is retried.
func (d *Dispatcher) noticeExhausted(ctx context.Context, tx pgx.Tx, r result) error {
	if !IsEventType(r.Delivery.EventType) {
		return nil
	}
	data := DeliveryExhaustedData{
		EndpointID: r.Delivery.EndpointID, MessageID: MessageID(r.Delivery.MessageID), EventType: r.Delivery.EventType,
		Attempts: r.Number, LastError: lastError(r),
	}
	key := EventDeliveryExhausted + ":" + r.Delivery.ID.String() + ":" + strconv.Itoa(int(r.Number))
	return d.notice(ctx, tx, r.Delivery.OrganizerID, r.Delivery.EndpointID, EventDeliveryExhausted, key, r.At, data)
}

// noticeNeedsReview stores, in the flush transaction that records r's
// delivery as needing review, a delivery.needs_review notice to the
// organizer's other endpoints that subscribe to it. As for
// delivery.exhausted, a notice or a test makes none, and the source key
// (delivery and attempt number) makes it one notice per entry into review.
func (d *Dispatcher) noticeNeedsReview(ctx context.Context, tx pgx.Tx, r result) error {
	if !IsEventType(r.Delivery.EventType) {
		return nil
	}
	data := DeliveryNeedsReviewData{
		EndpointID: r.Delivery.EndpointID, MessageID: MessageID(r.Delivery.MessageID), EventType: r.Delivery.EventType,
		Attempts: r.Number, StatusCode: r.StatusCode, LastError: lastError(r),
	}
	key := EventDeliveryNeedsReview + ":" + r.Delivery.ID.String() + ":" + strconv.Itoa(int(r.Number))
	return d.notice(ctx, tx, r.Delivery.OrganizerID, r.Delivery.EndpointID, EventDeliveryNeedsReview, key, r.At, data)
}

// noticeDisabled stores, in the transaction that disabled the endpoint, an
// endpoint.disabled notice to the organizer's other endpoints that
// subscribe to it. WebhookEndpointDisable returns a row only for the
// transition, so there is one notice per disabling.
func (d *Dispatcher) noticeDisabled(ctx context.Context, tx pgx.Tx, id uuid.UUID, reason string, row sqlcgen.WebhookEndpointDisableRow) error {
	data := EndpointDisabledData{EndpointID: id, Reason: reason, DisabledAt: row.DisabledAt.UTC(), FailingSince: db.UTC(row.FailingSince)}
	key := EventEndpointDisabled + ":" + id.String() + ":" + strconv.FormatInt(row.DisabledAt.UnixMicro(), 10)
	return d.notice(ctx, tx, row.OrganizerID, id, EventEndpointDisabled, key, row.DisabledAt, data)
}

// notice stores a notice of eventType about endpoint about, and queues it
// for the organizer's other enabled endpoints whose filter names the type.
func (d *Dispatcher) notice(ctx context.Context, tx pgx.Tx, org, about uuid.UUID, eventType, key string, at time.Time, data any) error {
	body, err := encodeBody(eventType, at, data)
	if err != nil {
		return err
	}
	n, err := d.q.WebhookNoticeInsert(ctx, tx, sqlcgen.WebhookNoticeInsertParams{
		ID: uuid.Must(uuid.NewV7()), OrganizerID: org, AboutEndpointID: about, EventType: eventType,
		Payload: body, SourceKey: key, CreatedAt: at,
	})
	if err != nil {
		return fmt.Errorf("store %s notice: %w", eventType, err)
	}
	if n > 0 {
		d.logger.InfoContext(ctx, "webhook notice stored", "type", eventType, "endpoint_id", about.String(),
			"organizer_id", org.String(), "deliveries", n)
	}
	return nil
}

// testMessage is the note every webhook.test carries.
const testMessage = "This is a test delivery from Boxoffice. It is signed like every other message; verify it with your endpoint's secret."
