package payments

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/webhook"

	"boxoffice/db"
	"boxoffice/outbox"
	"boxoffice/sqlcgen"
)

// ErrBadSignature is returned by Ingress.Receive for a payload whose
// signature does not verify (or is too old): nothing was read from it.
var ErrBadSignature = errors.New("webhook signature does not verify")

// IngressConfig configures NewIngress.
type IngressConfig struct {
	// WebhookSecret is the endpoint's signing secret (whsec_…). Required.
	WebhookSecret string
	// Tolerance is how old a signature may be, against replays. Defaults
	// to 5m, Stripe's default.
	Tolerance time.Duration
	// Logger receives the ingress's logs; bodies are never logged. Required.
	Logger *slog.Logger
}

// Ingress turns the provider's signed webhooks into domain events.
type Ingress struct {
	pool   *pgxpool.Pool
	cfg    IngressConfig
	logger *slog.Logger
}

// NewIngress returns an Ingress writing to pool.
func NewIngress(pool *pgxpool.Pool, cfg IngressConfig) *Ingress {
	cfg.Tolerance = cmp.Or(cfg.Tolerance, 5*time.Minute)
	return &Ingress{pool: pool, cfg: cfg, logger: cfg.Logger.With("component", "payments_ingress")}
}

// Received says what Receive did with a webhook.
type Received struct {
	// EventType is the provider's event type.
	EventType string
	// Duplicate is true when the event id had been received before: it had
	// no effect this time.
	Duplicate bool
	// DomainEvent is the outbox event written, empty when the type maps to
	// none or the payment is not one of ours.
	DomainEvent string
}

// Receive verifies the signature over the raw payload before parsing
// anything, then, in one transaction, records the provider's event id and
// writes the domain event it maps to into the outbox:
//
//	payment_intent.amount_capturable_updated → PaymentAuthorized
//	payment_intent.succeeded                 → PaymentCaptured
//	payment_intent.payment_failed            → PaymentFailed
//	payment_intent.canceled                  → AuthorizationCanceled
//	charge.refunded, refund.updated          → PaymentRefunded
//
// An event id seen before has no second effect (invariant 4); other types
// are recorded and ignored. It returns nil only after the commit, so the
// provider retries whatever was not stored. A bad signature is
// ErrBadSignature, and nothing is written.
func (in *Ingress) Receive(ctx context.Context, payload []byte, signature string) (Received, error) {
	ev, err := webhook.ConstructEventWithOptions(payload, signature, in.cfg.WebhookSecret,
		webhook.ConstructEventOptions{Tolerance: in.cfg.Tolerance, IgnoreAPIVersionMismatch: true})
	if err != nil {
		return Received{}, fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	r := Received{EventType: string(ev.Type)}
	err = db.WithTx(ctx, in.pool, func(ctx context.Context, tx pgx.Tx) error {
		q := sqlcgen.New()
		first, err := q.StripeEventInsert(ctx, tx, sqlcgen.StripeEventInsertParams{ID: ev.ID, Type: string(ev.Type)})
		if err != nil {
			return fmt.Errorf("record provider event: %w", err)
		}
		if r.Duplicate = !first; r.Duplicate {
			return nil
		}
		typ, orderID, payload, err := in.mapEvent(ctx, tx, ev)
		if err != nil || typ == "" {
			return err
		}
		correlation, err := q.OrderCorrelation(ctx, tx, orderID)
		if errors.Is(db.Interpret(err), db.ErrNotFound) {
			in.logger.WarnContext(ctx, "provider event names an unknown order; ignored",
				"provider_event_id", ev.ID, "event_type", ev.Type, "order_id", orderID)
			return nil
		} else if err != nil {
			return fmt.Errorf("read order: %w", err)
		}
		env, raw, err := outbox.NewOrderEvent(typ, orderID, time.Now(), correlation, "stripe:"+ev.ID, payload)
		if err != nil {
			return err
		}
		r.DomainEvent = typ
		return outbox.Insert(ctx, tx, env, raw)
	})
	if err != nil {
		return Received{}, err
	}
	return r, nil
}

// mapEvent returns the domain event a provider event becomes, or "" for
// none.
func (in *Ingress) mapEvent(ctx context.Context, tx pgx.Tx, ev stripe.Event) (string, uuid.UUID, any, error) {
	switch ev.Type {
	case "payment_intent.amount_capturable_updated", "payment_intent.succeeded",
		"payment_intent.payment_failed", "payment_intent.canceled":
		var pi stripe.PaymentIntent
		if err := json.Unmarshal(ev.Data.Raw, &pi); err != nil {
			return "", uuid.Nil, nil, fmt.Errorf("decode payment intent of %s: %w", ev.ID, err)
		}
		orderID, ok, err := in.orderOf(ctx, tx, pi.ID, pi.Metadata)
		if err != nil || !ok {
			return "", uuid.Nil, nil, err
		}
		switch ev.Type {
		case "payment_intent.amount_capturable_updated":
			return outbox.TypePaymentAuthorized, orderID, outbox.PaymentAuthorized{
				OrderID: orderID, PaymentIntentID: pi.ID, AmountCapturable: pi.AmountCapturable, ProviderEventID: ev.ID}, nil
		case "payment_intent.succeeded":
			return outbox.TypePaymentCaptured, orderID, outbox.PaymentCaptured{
				OrderID: orderID, PaymentIntentID: pi.ID, AmountReceived: pi.AmountReceived, ProviderEventID: ev.ID}, nil
		case "payment_intent.payment_failed":
			code := ""
			if pi.LastPaymentError != nil {
				code = cmp.Or(string(pi.LastPaymentError.DeclineCode), string(pi.LastPaymentError.Code))
			}
			return outbox.TypePaymentFailed, orderID, outbox.PaymentFailed{
				OrderID: orderID, PaymentIntentID: pi.ID, Code: code, ProviderEventID: ev.ID}, nil
		default:
			return outbox.TypeAuthorizationCanceled, orderID, outbox.AuthorizationCanceled{
				OrderID: orderID, PaymentIntentID: pi.ID, ProviderEventID: ev.ID}, nil
		}
	case "charge.refunded":
		var ch stripe.Charge
		if err := json.Unmarshal(ev.Data.Raw, &ch); err != nil {
			return "", uuid.Nil, nil, fmt.Errorf("decode charge of %s: %w", ev.ID, err)
		}
		if ch.PaymentIntent == nil {
			return "", uuid.Nil, nil, nil
		}
		orderID, ok, err := in.orderOf(ctx, tx, ch.PaymentIntent.ID, ch.Metadata)
		if err != nil || !ok {
			return "", uuid.Nil, nil, err
		}
		return outbox.TypePaymentRefunded, orderID, outbox.PaymentRefunded{
			OrderID: orderID, PaymentIntentID: ch.PaymentIntent.ID, AmountRefunded: ch.AmountRefunded, ProviderEventID: ev.ID}, nil
	case "refund.updated":
		var rf stripe.Refund
		if err := json.Unmarshal(ev.Data.Raw, &rf); err != nil {
			return "", uuid.Nil, nil, fmt.Errorf("decode refund of %s: %w", ev.ID, err)
		}
		if rf.PaymentIntent == nil || rf.Status != stripe.RefundStatusSucceeded {
			return "", uuid.Nil, nil, nil
		}
		orderID, ok, err := in.orderOf(ctx, tx, rf.PaymentIntent.ID, rf.Metadata)
		if err != nil || !ok {
			return "", uuid.Nil, nil, err
		}
		return outbox.TypePaymentRefunded, orderID, outbox.PaymentRefunded{
			OrderID: orderID, PaymentIntentID: rf.PaymentIntent.ID, AmountRefunded: rf.Amount, ProviderEventID: ev.ID}, nil
	}
	return "", uuid.Nil, nil, nil
}

// orderOf finds the order of a PaymentIntent: its "order_id" metadata,
// which CreateIntent always sets, else the local payment row.
func (in *Ingress) orderOf(ctx context.Context, tx pgx.Tx, intentID string, metadata map[string]string) (uuid.UUID, bool, error) {
	if id, err := uuid.Parse(metadata[orderIDKey]); err == nil {
		return id, true, nil
	}
	id, err := sqlcgen.New().PaymentOrderByIntent(ctx, tx, intentID)
	switch err = db.Interpret(err); {
	case err == nil:
		return id, true, nil
	case errors.Is(err, db.ErrNotFound):
		in.logger.WarnContext(ctx, "provider event for a payment that is not ours; ignored", "payment_intent_id", intentID)
		return uuid.Nil, false, nil
	default:
		return uuid.Nil, false, fmt.Errorf("find order of payment intent: %w", err)
	}
}
