// Package webhookreceiver is an example of receiving Boxoffice's webhooks
// the way docs/webhooks.md says to, small enough to copy: verify the
// signature and timestamp with the official Standard Webhooks library
// before reading the body; record the message's webhook-id and apply its
// effect in one database transaction, so that a redelivery or a replay
// is a no-op; answer 2xx only after that commit, so that a crash before
// it means Boxoffice retries; and let an older fact never overwrite a
// newer one, because messages about one order may arrive out of order.
//
// The project's tests drive it with every message type the dispatcher
// sends (examples/webhookreceiver/receiver_test.go). Run it with
// `go run ./examples/webhookreceiver/cmd/webhook-receiver`.
package webhookreceiver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Schema is what the receiver keeps: the webhook-ids it has processed,
// each order's latest known status, and the operational notices. A real
// receiver keeps its processed ids for at least Boxoffice's message
// retention (30 days by default), since an organizer may replay any
// retained message; delete older rows on a schedule.
const Schema = `
CREATE TABLE IF NOT EXISTS received_webhooks (
    webhook_id  text PRIMARY KEY,
    type        text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS order_status (
    order_id  uuid PRIMARY KEY,
    status    text NOT NULL,
    fact_at   timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS webhook_notices (
    webhook_id  text PRIMARY KEY REFERENCES received_webhooks,
    type        text NOT NULL,
    endpoint_id uuid NOT NULL,
    data        jsonb NOT NULL
);`

// maxBody bounds what the receiver reads; Boxoffice's messages are a few
// hundred bytes.
const maxBody = 1 << 20

// Receiver is an http.Handler for one endpoint's messages.
type Receiver struct {
	wh     *standardwebhooks.Webhook
	pool   *pgxpool.Pool
	logger *slog.Logger
}

// New returns a Receiver verifying with secret (whsec_…, shown when the
// endpoint was created or its secret rotated) and recording in pool,
// whose database must have Schema.
func New(secret string, pool *pgxpool.Pool, logger *slog.Logger) (*Receiver, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	return &Receiver{wh: wh, pool: pool, logger: logger}, nil
}

// message is the body of every Boxoffice webhook.
type message struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// orderData is what every order message's data starts with.
type orderData struct {
	OrderID string `json:"order_id"`
}

// noticeData is what every notice's (and webhook.test's) data starts with.
type noticeData struct {
	EndpointID string `json:"endpoint_id"`
}

// statusOf is the order status each order message tells.
var statusOf = map[string]string{
	"order.confirmed": "confirmed", "order.paid": "paid", "ticket.issued": "ticketed",
	"order.failed": "failed", "order.canceled": "canceled", "hold.expired": "failed",
	"order.refunded": "refunded", "order.partially_refunded": "partially_refunded",
}

// notices are the messages about the organizer's endpoints, not orders.
var notices = map[string]bool{"webhook.test": true, "endpoint.disabled": true, "delivery.exhausted": true, "delivery.needs_review": true}

// ServeHTTP verifies, records and applies one message. It answers 204
// once the message's effect is committed (or was committed before: a
// duplicate), 400 for a body it cannot read, 401 for a signature or
// timestamp that does not verify (nothing is read from such a body), and
// 500 when its database fails, so that Boxoffice retries.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	// Verify the exact bytes received, before parsing them; Verify also
	// refuses a timestamp more than 5 minutes away from this clock.
	if err := rc.wh.Verify(raw, r.Header); err != nil {
		rc.logger.WarnContext(r.Context(), "webhook refused", "reason", err.Error())
		http.Error(w, "signature does not verify", http.StatusUnauthorized)
		return
	}
	var m message
	if err := json.Unmarshal(raw, &m); err != nil || m.Type == "" {
		http.Error(w, "not a webhook message", http.StatusBadRequest)
		return
	}
	id := r.Header.Get(standardwebhooks.HeaderWebhookID)
	fresh, err := rc.apply(r.Context(), id, m)
	if err != nil {
		rc.logger.ErrorContext(r.Context(), "webhook not applied", "webhook_id", id, "error", err.Error())
		http.Error(w, "try again", http.StatusInternalServerError)
		return
	}
	rc.logger.InfoContext(r.Context(), "webhook received", "webhook_id", id, "type", m.Type, "duplicate", !fresh)
	w.WriteHeader(http.StatusNoContent)
}

// apply records id and applies m in one transaction. It reports false,
// changing nothing, when id was processed before.
func (rc *Receiver) apply(ctx context.Context, id string, m message) (fresh bool, err error) {
	err = pgx.BeginFunc(ctx, rc.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO received_webhooks (webhook_id, type) VALUES ($1, $2)
			ON CONFLICT (webhook_id) DO NOTHING`, id, m.Type)
		if err != nil {
			return fmt.Errorf("record %s: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return nil // a redelivery or a replay: applied before
		}
		fresh = true
		if status, ok := statusOf[m.Type]; ok {
			var d orderData
			if err := json.Unmarshal(m.Data, &d); err != nil {
				return fmt.Errorf("%s data: %w", m.Type, err)
			}
			// A fact older than the one we know changes nothing: order
			// messages may arrive out of order (a retry of an earlier one
			// after a later one succeeded).
			_, err = tx.Exec(ctx, `INSERT INTO order_status (order_id, status, fact_at) VALUES ($1, $2, $3)
				ON CONFLICT (order_id) DO UPDATE SET status = excluded.status, fact_at = excluded.fact_at
				WHERE order_status.fact_at < excluded.fact_at`, d.OrderID, status, m.Timestamp)
			if err != nil {
				return fmt.Errorf("order status: %w", err)
			}
			return nil
		}
		if !notices[m.Type] {
			// A type added after this receiver was written: acknowledged
			// (recorded above), not refused — a refusal would only be
			// retried until the delivery died.
			return nil
		}
		// webhook.test, endpoint.disabled, delivery.exhausted,
		// delivery.needs_review: kept for a person to read.
		var d noticeData
		if err := json.Unmarshal(m.Data, &d); err != nil {
			return fmt.Errorf("%s data: %w", m.Type, err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO webhook_notices (webhook_id, type, endpoint_id, data) VALUES ($1, $2, $3, $4)`,
			id, m.Type, d.EndpointID, m.Data)
		if err != nil {
			return fmt.Errorf("notice: %w", err)
		}
		return nil
	})
	return fresh, err
}
