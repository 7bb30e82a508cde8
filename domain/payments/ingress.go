package payments

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/webhook"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"boxoffice/domain/purchase"
	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/platform/outbox"
	"boxoffice/platform/promreg"
	"boxoffice/platform/telemetry"
	"boxoffice/sqlcgen"
)

// ErrBadSignature is returned by Ingress.Receive for a payload whose
// signature does not verify, or is dated outside the tolerance (too old or
// too far ahead): nothing was read from it.
var ErrBadSignature = fault.New(fault.CodeInvalid, "webhook signature does not verify")

// ErrInvalidEvent is returned by Ingress.Receive for a validly signed
// event that carries an id, type or code Stripe never sends (a NUL or any
// other character outside [A-Za-z0-9_], a missing prefix, or more than 255
// bytes), or without an object of its type's shape: nothing was written.
var ErrInvalidEvent = fault.New(fault.CodeInvalid, "webhook event is malformed")

// IngressConfig configures NewIngress.
type IngressConfig struct {
	// WebhookSecret is the endpoint's signing secret (whsec_…). Required.
	WebhookSecret string
	// Tolerance is how far a signature's timestamp may be from now, in the
	// past (against replays) and in the future (against events signed
	// ahead to be replayed later). Defaults to 5m, Stripe's default.
	Tolerance time.Duration
	// Logger receives the ingress's logs; bodies are never logged. Required.
	Logger *slog.Logger
	// Provider is consulted when a PaymentIntent event disagrees with the
	// order's local state (see Receive). Defaults to none: events are
	// acted on as they come, which is right only in tests of the mapping.
	Provider Provider
	// Registerer receives boxoffice_payment_webhook_mismatches_total.
	// Defaults to none.
	Registerer prometheus.Registerer
	// Tickets, when set, issues a paid order's tickets in the transaction
	// that applies its capture webhook (purchase.SagaConfig.Tickets); a
	// capture whose tickets cannot be issued there is recorded for the
	// saga's consumer, whose step requests them. Nil: the tickets consumer
	// issues every order's tickets.
	Tickets purchase.TicketIssuer
	// PaymentGrace is how much longer, at most, an order's hold is kept
	// when the provider says its intent is being confirmed
	// (purchase.GraceForPayment). Zero defaults to
	// purchase.DefaultPaymentGrace; negative turns the grace off.
	PaymentGrace time.Duration
}

// Ingress turns the provider's signed webhooks into domain events.
type Ingress struct {
	pool *pgxpool.Pool
	// saga applies the domain events' steps as they are recorded.
	saga   *purchase.Saga
	cfg    IngressConfig
	logger *slog.Logger
	// mismatches counts webhooks that disagreed with the order, by the
	// domain event the provider's current state stood for.
	mismatches *prometheus.CounterVec
}

// NewIngress returns an Ingress writing to pool.
func NewIngress(pool *pgxpool.Pool, cfg IngressConfig) *Ingress {
	cfg.Tolerance = cmp.Or(cfg.Tolerance, 5*time.Minute)
	return &Ingress{
		pool: pool, cfg: cfg, logger: cfg.Logger.With("component", "payments_ingress"),
		saga: purchase.NewSaga(purchase.SagaConfig{Logger: cfg.Logger, Tickets: cfg.Tickets}),
		mismatches: promreg.CounterVec(cfg.Registerer, "boxoffice_payment_webhook_mismatches_total",
			"Provider webhooks that disagreed with the order's local state, so the intent was re-read; by what the provider's current state was acted on as.", "acted_as"),
	}
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
	// Applied is true when the saga's step for DomainEvent was applied in
	// the same transaction (Apply); false when it was left to the saga's
	// consumer.
	Applied bool
}

// Receive verifies the signature over the raw payload before parsing
// anything, then, in one transaction, records the provider's event id,
// writes the domain event it maps to into the outbox and applies the
// saga's step for it (Apply):
//
//	payment_intent.amount_capturable_updated → PaymentAuthorized
//	payment_intent.succeeded                 → PaymentCaptured
//	payment_intent.payment_failed            → PaymentFailed
//	payment_intent.canceled                  → AuthorizationCanceled
//	charge.refunded, refund.updated          → PaymentRefunded
//
// An event id seen before has no second effect (invariant 4); other types
// are recorded and ignored. It returns nil only after the commit, so the
// provider retries whatever was not stored. A bad signature, or one dated
// more than Tolerance from now either way, is ErrBadSignature; an event
// whose ids are not Stripe ids is ErrInvalidEvent; in both cases nothing is
// written.
func (in *Ingress) Receive(ctx context.Context, payload []byte, signature string) (Received, error) {
	ev, err := in.Verify(payload, signature)
	if err != nil {
		return Received{}, err
	}
	return in.Apply(ctx, ev)
}

// Verify checks a webhook's signature over its raw bytes, and then its
// event's id and type, and returns the event. Nothing in payload is read
// before the signature verifies. Its errors are Receive's: ErrBadSignature
// or ErrInvalidEvent.
func (in *Ingress) Verify(payload []byte, signature string) (stripe.Event, error) {
	if err := webhook.ValidatePayloadWithTolerance(payload, signature, in.cfg.WebhookSecret, in.cfg.Tolerance); err != nil {
		return stripe.Event{}, fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	ev, err := parseEvent(payload)
	if err != nil {
		return stripe.Event{}, fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	// stripe-go bounds only the past: a signature dated ahead would stay
	// replayable until then.
	if at, ok := signatureTime(signature); !ok || time.Until(at) > in.cfg.Tolerance {
		return stripe.Event{}, fmt.Errorf("%w: timestamp is in the future", ErrBadSignature)
	}
	if err := errors.Join(checkID("event id", ev.ID, "evt_"), checkType(string(ev.Type))); err != nil {
		return stripe.Event{}, err
	}
	return ev, nil
}

// eventJSON is what the ingress reads of a Stripe event, decoded once:
// stripe.Event's own decoding reads data.object twice, as bytes and as a
// map of it, and that map was the most of a webhook's decoding.
type eventJSON struct {
	ID         string           `json:"id"`
	Type       stripe.EventType `json:"type"`
	Created    int64            `json:"created"`
	Livemode   bool             `json:"livemode"`
	APIVersion string           `json:"api_version"`
	Data       *struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

// parseEvent decodes a verified payload into the stripe.Event the
// ingress works with: its id, type, creation time, mode, API version and
// data.object as raw bytes (EventData.Raw, which decodeObject reads);
// EventData.Object, the map, is left nil.
func parseEvent(payload []byte) (stripe.Event, error) {
	var e eventJSON
	if err := json.Unmarshal(payload, &e); err != nil {
		return stripe.Event{}, fmt.Errorf("parse webhook body: %w", err)
	}
	ev := stripe.Event{ID: e.ID, Type: e.Type, Created: e.Created, Livemode: e.Livemode, APIVersion: e.APIVersion}
	if e.Data != nil {
		ev.Data = &stripe.EventData{Raw: e.Data.Object}
	}
	return ev, nil
}

// OrderOfEvent returns the order a verified event's object names in its
// metadata (metadata["order_id"], as every intent this service creates,
// and the charge and refund of one, carry), if it names one.
func OrderOfEvent(ev stripe.Event) (uuid.UUID, bool) {
	if ev.Data == nil || len(ev.Data.Raw) == 0 {
		return uuid.Nil, false
	}
	var obj struct {
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(ev.Data.Raw, &obj); err != nil {
		return uuid.Nil, false
	}
	id, err := uuid.Parse(obj.Metadata["order_id"])
	return id, err == nil
}

// Apply is Receive for an event Verify returned: it records the event and
// its effect, as Receive documents.
//
// The effect is the saga's step, applied here, in the transaction that
// records the provider's event id (purchase.Saga.Apply): the order and its
// hold are locked and the state the step expects is checked as the
// saga's consumer would, and the domain event is written with
// AppliedBy purchase.SagaConsumer, so that consumer has nothing left to
// do; the bus still carries it to everyone else (webhooks, order
// streams). A fact that came before the state it applies to
// (purchase.ErrTooEarly: a capture before its authorization was applied,
// an authorization before the payment row) is recorded for the saga's
// consumer to apply once it can.
func (in *Ingress) Apply(ctx context.Context, ev stripe.Event) (Received, error) {
	m, err := in.mapEvent(ctx, ev)
	if err != nil {
		return Received{}, err
	}
	if telemetry.Enabled() && m.orderID != uuid.Nil {
		var span trace.Span
		ctx, span = in.continueOrder(ctx, ev, m)
		defer span.End()
	}
	// An event that agrees with its order's state is recorded in one
	// transaction. One that disagrees rolls that transaction back, the
	// intent is re-read from the provider outside any transaction (nobody
	// calls the provider holding locks), and what it says now is recorded.
	checked := m.intentID == "" || in.cfg.Provider == nil
	apply := true
	for {
		var r Received
		r, err = db.WithTxV(ctx, in.pool, func(ctx context.Context, tx pgx.Tx) (Received, error) {
			return in.record(ctx, tx, ev, m, checked, apply)
		})
		var dis *disagreement
		switch {
		case isDuplicate(err):
			in.countDuplicate(ctx, ev)
			return Received{EventType: string(ev.Type), Duplicate: true}, nil
		case errors.As(err, &dis):
			checked = true
			if m, err = in.reconcile(ctx, ev, m, dis.status, dis.correlationID); err != nil {
				return Received{}, err
			}
			continue
		case apply && (errors.Is(err, purchase.ErrTooEarly) || errors.Is(err, purchase.ErrPermanent) ||
			errors.Is(err, purchase.ErrTicketsNotIssued)):
			// The saga's consumer applies it when it can (and
			// dead-letters what it never can); an unknown order is
			// logged and ignored by record. A capture whose tickets
			// could not be issued here is applied there too, and its
			// tickets requested from the tickets consumer.
			apply = false
			continue
		case err != nil:
			return Received{}, err
		}
		return r, nil
	}
}

// record is one attempt of Apply's transaction: the provider's event id,
// then, unless it was seen before, its effect: the grace of an intent
// being confirmed, or the domain event, applied when apply is true and
// else written for the saga's consumer. Unless checked, a domain event
// that contradicts its order's state stops it with a disagreement.
func (in *Ingress) record(ctx context.Context, tx pgx.Tx, ev stripe.Event, m mapped, checked, apply bool) (Received, error) {
	r := Received{EventType: string(ev.Type)}
	q := sqlcgen.New()
	// The id goes with the transaction's next statement, or its commit:
	// one seen before fails that (isDuplicate), and nothing of this
	// transaction commits.
	rec := sqlcgen.StripeEventRecordParams{ID: ev.ID, Type: string(ev.Type)}
	if m.orderID != uuid.Nil {
		rec.OrderID = &m.orderID // the order's timeline finds its webhooks by it
	}
	if err := q.StripeEventRecord(ctx, db.Deferring(tx), rec); err != nil {
		return r, fmt.Errorf("record provider event: %w", err)
	}
	if m.inFlight != "" {
		return r, in.grace(ctx, tx, ev, m)
	}
	if m.typ == "" {
		return r, nil
	}
	env, _, err := outbox.NewOrderEvent(m.typ, m.orderID, time.Now(), "", "stripe:"+ev.ID, m.payload)
	if err != nil {
		return r, err
	}
	write := func(status purchase.OrderStatus, correlationID string) error {
		if !checked && status.ContradictedBy(m.typ) {
			return &disagreement{status: string(status), correlationID: correlationID}
		}
		env.CorrelationID = correlationID
		raw, err := json.Marshal(env)
		if err != nil {
			return fmt.Errorf("marshal %s envelope: %w", env.EventType, err)
		}
		r.DomainEvent = m.typ
		return outbox.Insert(ctx, tx, env, raw)
	}
	if apply {
		env.AppliedBy = purchase.SagaConsumer
		err := in.saga.Apply(ctx, tx, env, func(o *purchase.OrderTx) error {
			return write(o.Status(), o.CorrelationID())
		})
		r.Applied = err == nil
		return r, err
	}
	order, err := q.OrderStatusGet(ctx, tx, m.orderID)
	if errors.Is(err, db.ErrNotFound) {
		in.logger.WarnContext(ctx, "provider event names an unknown order; ignored",
			"provider_event_id", ev.ID, "event_type", ev.Type, "metadata_order_id", m.orderID)
		return r, nil
	} else if err != nil {
		return r, fmt.Errorf("read order: %w", err)
	}
	return r, write(purchase.OrderStatus(order.Status), order.CorrelationID)
}

// countDuplicate counts a delivery of an event id recorded before on its
// stripe_events row, which the order's timeline shows as ignored. It is
// one statement on the duplicate's path only; a failure is logged and
// changes nothing of the answer: the duplicate had no effect either way.
func (in *Ingress) countDuplicate(ctx context.Context, ev stripe.Event) {
	if err := sqlcgen.New().StripeEventDuplicate(ctx, in.pool, ev.ID); err != nil && ctx.Err() == nil {
		in.logger.WarnContext(ctx, "count duplicate provider event", "provider_event_id", ev.ID, "error", err)
	}
}

// isDuplicate reports whether err is record's failure to record a
// provider event id that was recorded before.
func isDuplicate(err error) bool {
	return errors.Is(err, db.ErrConflict) && db.ConstraintName(err) == "stripe_events_pkey"
}

// disagreement stops Receive's transaction when the event contradicts its
// order's state, for the intent to be re-read.
type disagreement struct{ status, correlationID string }

func (d *disagreement) Error() string { return "provider event disagrees with the order's state" }

// mapped is the domain event a provider event becomes: typ is empty for
// none; intentID is set for PaymentIntent events, which reconcile may
// check against the provider.
type mapped struct {
	typ      string
	orderID  uuid.UUID
	payload  any
	intentID string
	// inFlight, for an intent being confirmed, is its status
	// (requires_action, processing): no domain event, but the order's
	// hold may be kept a little longer (purchase.GraceForPayment).
	inFlight string
}

// reconcile re-reads the intent from the provider for an event that
// disagrees with the order's local state, and returns what to act on: what
// the provider says now rather than the event. Webhooks arrive late and
// out of order (a decline of an earlier attempt can land after the
// authorization of a later one), and a stale event must not fail a paid
// order. An event that agrees is taken as it is, without a provider call
// (Receive only calls reconcile for one that does not).
func (in *Ingress) reconcile(ctx context.Context, ev stripe.Event, m mapped, status, correlationID string) (mapped, error) {
	log := in.logger.With("provider_event_id", ev.ID, "event_type", ev.Type, "order_id", m.orderID,
		"correlation_id", correlationID, "causation_id", "stripe:"+ev.ID,
		"order_status", status, "payment_intent_id", m.intentID)
	intent, err := in.cfg.Provider.Get(ctx, m.intentID)
	var perr *Error
	switch {
	case errors.As(err, &perr) && perr.Code == CodeResourceMissing:
		log.WarnContext(ctx, "provider event disagrees with the order, and the provider does not know its intent; acting on the event")
		return m, nil
	case err != nil:
		return m, fmt.Errorf("re-read payment intent %s: %w", m.intentID, err)
	}
	now := fromIntent(m.orderID, intent, ev.ID)
	in.mismatches.WithLabelValues(cmp.Or(now.typ, "nothing")).Inc()
	log.InfoContext(ctx, "provider event disagrees with the order; acting on the intent as the provider reports it now",
		"intent_status", intent.Status, "event_means", m.typ, "acting_as", cmp.Or(now.typ, "nothing"))
	return now, nil
}

// fromIntent is the domain event an intent's current status stands for:
// what the webhook for that status would have mapped to. Statuses in
// between (requires_action, processing, …) stand for nothing yet.
func fromIntent(orderID uuid.UUID, in Intent, providerEventID string) mapped {
	m := mapped{orderID: orderID, intentID: in.ID}
	switch in.Status {
	case StatusRequiresCapture:
		m.typ, m.payload = outbox.TypePaymentAuthorized, outbox.PaymentAuthorized{
			OrderID: orderID, PaymentIntentID: in.ID, AmountCapturable: in.AmountCapturable, ProviderEventID: providerEventID}
	case StatusSucceeded:
		m.typ, m.payload = outbox.TypePaymentCaptured, outbox.PaymentCaptured{
			OrderID: orderID, PaymentIntentID: in.ID, AmountReceived: in.AmountReceived, ProviderEventID: providerEventID}
	case StatusCanceled:
		m.typ, m.payload = outbox.TypeAuthorizationCanceled, outbox.AuthorizationCanceled{
			OrderID: orderID, PaymentIntentID: in.ID, ProviderEventID: providerEventID}
	case StatusRequiresPaymentMethod:
		if in.LastPaymentError != nil {
			m.typ, m.payload = outbox.TypePaymentFailed, outbox.PaymentFailed{
				OrderID: orderID, PaymentIntentID: in.ID, ProviderEventID: providerEventID,
				Code: cmp.Or(in.LastPaymentError.DeclineCode, in.LastPaymentError.Code)}
		}
	}
	return m
}

// mapEvent returns the domain event a provider event becomes, or "" for
// none.
// decodeObject decodes the object of ev into v. A signed event without
// an object, or whose object is not of its type's shape, is malformed
// (ErrInvalidEvent): nothing Stripe sends.
func decodeObject(ev stripe.Event, v any) error {
	if ev.Data == nil || len(ev.Data.Raw) == 0 {
		return fmt.Errorf("%w: no data.object", ErrInvalidEvent)
	}
	if err := json.Unmarshal(ev.Data.Raw, v); err != nil {
		return fmt.Errorf("%w: data.object: %w", ErrInvalidEvent, err)
	}
	return nil
}

// decodeIntent decodes the PaymentIntent of a payment_intent.* event and
// checks its id.
func decodeIntent(ev stripe.Event) (stripe.PaymentIntent, error) {
	var pi stripe.PaymentIntent
	if err := decodeObject(ev, &pi); err != nil {
		return pi, fmt.Errorf("decode payment intent of %s: %w", ev.ID, err)
	}
	return pi, checkID("payment intent id", pi.ID, "pi_")
}

// refunded maps a refund the provider reports of intentID (metadata is
// its object's, amount what it says was refunded) to PaymentRefunded: the
// same fact whether a charge.refunded or a refund.updated brings it. An
// intent that is no order's maps to nothing.
func (in *Ingress) refunded(ctx context.Context, ev stripe.Event, intentID string, metadata map[string]string, amount int64) (mapped, error) {
	if err := checkID("payment intent id", intentID, "pi_"); err != nil {
		return mapped{}, err
	}
	orderID, ok, err := in.orderOf(ctx, intentID, metadata)
	if err != nil || !ok {
		return mapped{}, err
	}
	return mapped{typ: outbox.TypePaymentRefunded, orderID: orderID, payload: outbox.PaymentRefunded{
		OrderID: orderID, PaymentIntentID: intentID, AmountRefunded: amount, ProviderEventID: ev.ID}}, nil
}

func (in *Ingress) mapEvent(ctx context.Context, ev stripe.Event) (mapped, error) {
	switch ev.Type {
	case EventRequiresAction, EventProcessing:
		pi, err := decodeIntent(ev)
		if err != nil {
			return mapped{}, err
		}
		orderID, ok, err := in.orderOf(ctx, pi.ID, pi.Metadata)
		if err != nil || !ok {
			return mapped{}, err
		}
		status := string(StatusRequiresAction)
		if ev.Type == EventProcessing {
			status = string(StatusProcessing)
		}
		return mapped{orderID: orderID, intentID: pi.ID, inFlight: status}, nil
	case "payment_intent.amount_capturable_updated", "payment_intent.succeeded",
		"payment_intent.payment_failed", "payment_intent.canceled":
		pi, err := decodeIntent(ev)
		if err != nil {
			return mapped{}, err
		}
		if pi.LastPaymentError != nil {
			err := errors.Join(checkCode("error code", string(pi.LastPaymentError.Code)),
				checkCode("decline code", string(pi.LastPaymentError.DeclineCode)))
			if err != nil {
				return mapped{}, err
			}
		}
		orderID, ok, err := in.orderOf(ctx, pi.ID, pi.Metadata)
		if err != nil || !ok {
			return mapped{}, err
		}
		switch ev.Type {
		case "payment_intent.amount_capturable_updated":
			return mapped{typ: outbox.TypePaymentAuthorized, orderID: orderID, intentID: pi.ID, payload: outbox.PaymentAuthorized{
				OrderID: orderID, PaymentIntentID: pi.ID, AmountCapturable: pi.AmountCapturable, ProviderEventID: ev.ID}}, nil
		case "payment_intent.succeeded":
			return mapped{typ: outbox.TypePaymentCaptured, orderID: orderID, intentID: pi.ID, payload: outbox.PaymentCaptured{
				OrderID: orderID, PaymentIntentID: pi.ID, AmountReceived: pi.AmountReceived, ProviderEventID: ev.ID}}, nil
		case "payment_intent.payment_failed":
			code := ""
			if pi.LastPaymentError != nil {
				code = cmp.Or(string(pi.LastPaymentError.DeclineCode), string(pi.LastPaymentError.Code))
			}
			return mapped{typ: outbox.TypePaymentFailed, orderID: orderID, intentID: pi.ID, payload: outbox.PaymentFailed{
				OrderID: orderID, PaymentIntentID: pi.ID, Code: code, ProviderEventID: ev.ID}}, nil
		default:
			return mapped{typ: outbox.TypeAuthorizationCanceled, orderID: orderID, intentID: pi.ID, payload: outbox.AuthorizationCanceled{
				OrderID: orderID, PaymentIntentID: pi.ID, ProviderEventID: ev.ID}}, nil
		}
	case "charge.refunded":
		var ch stripe.Charge
		if err := decodeObject(ev, &ch); err != nil {
			return mapped{}, fmt.Errorf("decode charge of %s: %w", ev.ID, err)
		}
		if ch.PaymentIntent == nil {
			return mapped{}, nil
		}
		return in.refunded(ctx, ev, ch.PaymentIntent.ID, ch.Metadata, ch.AmountRefunded)
	case "refund.updated":
		var rf stripe.Refund
		if err := decodeObject(ev, &rf); err != nil {
			return mapped{}, fmt.Errorf("decode refund of %s: %w", ev.ID, err)
		}
		if rf.PaymentIntent == nil || rf.Status != stripe.RefundStatusSucceeded {
			return mapped{}, nil
		}
		return in.refunded(ctx, ev, rf.PaymentIntent.ID, rf.Metadata, rf.Amount)
	}
	return mapped{}, nil
}

// orderOf finds the order of a PaymentIntent: its "order_id" metadata,
// which CreateIntent always sets, else the local payment row.
func (in *Ingress) orderOf(ctx context.Context, intentID string, metadata map[string]string) (uuid.UUID, bool, error) {
	if id, err := uuid.Parse(metadata[orderIDKey]); err == nil {
		return id, true, nil
	}
	id, err := sqlcgen.New().PaymentOrderByIntent(ctx, db.Interpreting(in.pool), intentID)
	switch {
	case err == nil:
		return id, true, nil
	case errors.Is(err, db.ErrNotFound):
		in.logger.WarnContext(ctx, "provider event for a payment that is not ours; ignored", "payment_intent_id", intentID)
		return uuid.Nil, false, nil
	default:
		return uuid.Nil, false, fmt.Errorf("find order of payment intent: %w", err)
	}
}

// signatureTime returns the t= of a Stripe-Signature header, read as
// stripe-go reads it (the last t= wins), and whether there was one.
func signatureTime(header string) (time.Time, bool) {
	var at time.Time
	ok := false
	for pair := range strings.SplitSeq(header, ",") {
		k, v, found := strings.Cut(pair, "=")
		if !found || k != "t" {
			continue
		}
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, false
		}
		at, ok = time.Unix(sec, 0), true
	}
	return at, ok
}

// maxIDLength bounds every id, type and code of a provider event.
const maxIDLength = 255

// isToken reports whether s is 1 to maxIDLength bytes of [A-Za-z0-9_],
// plus the bytes in extra: the alphabet of Stripe's ids and codes. Nothing
// else (a NUL, which PostgreSQL refuses in text, a space, non-ASCII) ever
// comes from Stripe.
func isToken(s, extra string) bool {
	if len(s) == 0 || len(s) > maxIDLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || strings.IndexByte(extra, c) >= 0) {
			return false
		}
	}
	return true
}

// checkID returns ErrInvalidEvent unless id is a Stripe id with prefix.
func checkID(what, id, prefix string) error {
	if !strings.HasPrefix(id, prefix) || len(id) == len(prefix) || !isToken(id, "") {
		return fmt.Errorf("%w: %s is not a Stripe id", ErrInvalidEvent, what)
	}
	return nil
}

// checkType returns ErrInvalidEvent unless typ looks like a Stripe event
// type (payment_intent.succeeded).
func checkType(typ string) error {
	if !isToken(typ, ".") {
		return fmt.Errorf("%w: event type is not a Stripe event type", ErrInvalidEvent)
	}
	return nil
}

// checkCode returns ErrInvalidEvent unless code is empty or a Stripe code
// (card_declined, insufficient_funds).
func checkCode(what, code string) error {
	if code != "" && !isToken(code, "") {
		return fmt.Errorf("%w: %s is not a Stripe code", ErrInvalidEvent, what)
	}
	return nil
}

// grace applies an intent-in-flight event: the payments row's status, and
// the order's hold kept for the grace (purchase.GraceForPayment).
func (in *Ingress) grace(ctx context.Context, tx pgx.Tx, ev stripe.Event, m mapped) error {
	grace := in.cfg.PaymentGrace
	switch {
	case grace == 0:
		grace = purchase.DefaultPaymentGrace
	case grace < 0:
		grace = 0
	}
	extended, until, err := purchase.GraceForPayment(ctx, tx, m.orderID, m.intentID, m.inFlight, grace)
	if err != nil {
		return err
	}
	if extended {
		in.logger.InfoContext(ctx, "payment being confirmed; hold kept for the grace",
			"provider_event_id", ev.ID, "order_id", m.orderID, "intent_status", m.inFlight, "hold_expires_at", until)
	}
	return nil
}

// continueOrder starts the span that applies ev (tracing on) in the
// order's trace: the child of the order's hold request, read from the
// order, and linked to the request that brought ev (the provider's
// webhook carries no trace of ours). So the order's trace goes on from
// the hold through the provider's answer to the ticket. An order without
// a stored trace gets the span as the request's child.
func (in *Ingress) continueOrder(ctx context.Context, ev stripe.Event, m mapped) (context.Context, trace.Span) {
	parent := ctx
	tp, err := sqlcgen.New().OrderTraceParent(ctx, db.Interpreting(in.pool), m.orderID)
	if err == nil && tp != "" {
		parent = telemetry.Continue(ctx, tp)
	}
	attrs := []attribute.KeyValue{
		attribute.String("boxoffice.provider_event.id", ev.ID),
		attribute.String("boxoffice.provider_event.type", string(ev.Type)),
		telemetry.OrderID.String(m.orderID.String()),
	}
	if m.intentID != "" {
		attrs = append(attrs, telemetry.PaymentIntent.String(m.intentID))
	}
	return telemetry.Tracer().Start(parent, "apply "+string(ev.Type),
		trace.WithLinks(trace.LinkFromContext(ctx)),
		trace.WithAttributes(attrs...))
}
