package webhooks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/sqlcgen"
)

// StoreWaitlistOffered stores, in tx (the transaction that makes the
// offer), a waitlist.offered message to organizerID and one pending
// delivery per enabled endpoint of theirs that subscribes to it. The
// message exists only when some endpoint subscribes when tx runs (as the
// fan-out decides for order facts), and once per offer: its source key is
// the entry and the offer's expiry, so a transaction retried after a
// lock race stores it once.
func StoreWaitlistOffered(ctx context.Context, tx pgx.Tx, organizerID uuid.UUID, correlationID string, at time.Time, data WaitlistOfferedData) error {
	body, err := encodeBody(EventWaitlistOffered, at, data)
	if err != nil {
		return err
	}
	q := sqlcgen.New()
	n, err := q.WebhookSubscriberCount(ctx, tx, sqlcgen.WebhookSubscriberCountParams{OrganizerID: organizerID, EventType: EventWaitlistOffered})
	if err != nil {
		return fmt.Errorf("read endpoints subscribing to %s: %w", EventWaitlistOffered, err)
	}
	if n == 0 {
		return nil
	}
	key := EventWaitlistOffered + ":" + data.EntryID.String() + ":" + fmt.Sprint(data.ExpiresAt.UnixMicro())
	id, err := q.WebhookMessageInsert(ctx, tx, sqlcgen.WebhookMessageInsertParams{
		ID: uuid.Must(uuid.NewV7()), OrganizerID: organizerID, EventType: EventWaitlistOffered, Payload: body,
		SourceKey: key, CorrelationID: correlationID, CreatedAt: at,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // stored before, by an earlier run of the same offer
	} else if err != nil {
		return fmt.Errorf("store %s message: %w", EventWaitlistOffered, err)
	}
	if _, err := q.WebhookDeliveryFanOut(ctx, tx, sqlcgen.WebhookDeliveryFanOutParams{
		MessageID: id, OrganizerID: organizerID, EventType: EventWaitlistOffered,
	}); err != nil {
		return fmt.Errorf("queue %s deliveries: %w", EventWaitlistOffered, err)
	}
	return nil
}
