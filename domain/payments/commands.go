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

	"boxoffice/domain/payments/record"
	"boxoffice/domain/purchase"
	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/platform/outbox"
)

// CommandsConfig configures NewCommands.
type CommandsConfig struct {
	// Provider moves the money: Stripe, or sandbox.Sandbox when
	// BOXOFFICE_PAYMENTS=sandbox. Required.
	Provider Provider
	// ProviderName is what payments.provider records for the intents
	// these commands create, e.g. "stripe" or "sandbox". Required.
	ProviderName string
	// CallTimeout bounds each call to the provider. A call that runs out is
	// retried with the same idempotency key, so it never acts twice.
	// Defaults to 30s.
	CallTimeout time.Duration
	// Logger receives the commands' logs, scoped with component=consumer
	// and consumer=payments (the payments consumer is their one caller,
	// and its logs read as they did when this logic lived there). Client
	// secrets are never logged. Required.
	Logger *slog.Logger
}

// Commands is the payment policy of the purchase saga (docs/saga.md): it
// turns the saga's four commands into calls to the payment provider and
// decides what each answer means. The payments consumer (consumers,
// PaymentCommandsFunc) wires it: Call runs before the consumer's
// transaction, outside it, with an idempotency key derived from facts that
// do not change between deliveries, and the RecordFunc it returns records
// what the provider answered in that transaction:
//
//	PaymentAuthorizationRequested  CreateIntent "authorize:<event_id>" → payments row
//	                               (intent id, client secret, status) + PaymentIntentCreated,
//	                               its saga step applied in the same transaction
//	CaptureRequested               Capture "capture:<order_id>" → payments.status; a
//	                               permanent refusal → PaymentFailed{code: capture_failed}
//	AuthorizationCancelRequested   Cancel "cancel:<order_id>" → payments.status; an intent
//	                               that can no longer be canceled → nothing
//	RefundRequested                Refund "refund:<order_id>" (whole: what is left) or
//	                               "refund:<refund_id>" (amount_minor of selected
//	                               tickets); already refunded → nothing
//
// The provider's later facts (authorized, captured, canceled, refunded)
// arrive through its webhooks, not from here. A retryable provider error
// is returned as it is, for the consumer runtime to retry with backoff; a
// refusal the saga has no answer for (an unknown intent, an invalid
// request, bad credentials) is returned wrapped in fault.Permanent, which
// dead-letters the command. The payments row is written through package
// record, its one writer. Events it writes carry the command's
// correlation id, and its event id as their causation id. The client
// secret goes to the payments row and nowhere else: not to events, logs or
// errors.
type Commands struct {
	cfg    CommandsConfig
	logger *slog.Logger
	// saga applies PaymentIntentCreated's step where the intent is
	// recorded.
	saga *purchase.Saga
}

// NewCommands returns the payment commands; the payments consumer runs
// them (consumers.NewExternal with consumers.PaymentCommandsFunc).
// Returns an error when a required field is missing.
func NewCommands(cfg CommandsConfig) (*Commands, error) {
	cfg.CallTimeout = cmp.Or(cfg.CallTimeout, 30*time.Second)
	var errs []error
	if cfg.Provider == nil {
		errs = append(errs, errors.New("Provider is required"))
	}
	if cfg.ProviderName == "" {
		errs = append(errs, errors.New("ProviderName is required"))
	}
	if cfg.CallTimeout < 0 {
		errs = append(errs, errors.New("CallTimeout must not be negative"))
	}
	if cfg.Logger == nil {
		errs = append(errs, errors.New("Logger is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("payment commands config: %w", err)
	}
	return &Commands{
		cfg:    cfg,
		logger: cfg.Logger.With("component", "consumer", "consumer", "payments"),
		saga:   purchase.NewSaga(purchase.SagaConfig{Logger: cfg.Logger}),
	}, nil
}

// RecordFunc is the in-transaction half of a command: it records what the
// provider answered in tx, the consumer's inbox transaction, and writes
// the events that follow to the outbox there. ev is the command.
type RecordFunc func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error

// Call calls the provider for the command in ev and returns what to record
// in the consumer's transaction (nil: nothing). An event that is not one
// of the four commands is left untouched: nil, nil.
func (p *Commands) Call(ctx context.Context, ev outbox.Envelope) (RecordFunc, error) {
	switch ev.EventType {
	case outbox.TypePaymentAuthorizationRequested:
		return p.authorize(ctx, ev)
	case outbox.TypeCaptureRequested:
		return p.capture(ctx, ev)
	case outbox.TypeAuthorizationCancelRequested:
		return p.cancel(ctx, ev)
	case outbox.TypeRefundRequested:
		return p.refund(ctx, ev)
	}
	p.eventLogger(ev, ev.AggregateID, "").DebugContext(ctx, "not a payment command; ignored")
	return nil, nil
}

// authorize creates the order's PaymentIntent. The key is the command's
// event id, so a redelivery gets the same intent back however often the
// transaction that records it failed.
func (p *Commands) authorize(ctx context.Context, ev outbox.Envelope) (RecordFunc, error) {
	cmd, err := paymentPayload[outbox.PaymentAuthorizationRequested](ev)
	if err != nil {
		return nil, err
	}
	orderID := cmp.Or(cmd.OrderID, ev.AggregateID)
	log := p.eventLogger(ev, orderID, "")
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	intent, err := p.cfg.Provider.CreateIntent(callCtx, CreateIntentParams{
		OrderID:        orderID,
		AmountMinor:    cmd.AmountMinor,
		Currency:       cmd.Currency,
		IdempotencyKey: "authorize:" + ev.EventID.String(),
		Metadata:       map[string]string{"hold_id": cmd.HoldID.String()},
	})
	cancel()
	if err != nil {
		return nil, p.providerError(ctx, log, "create intent", err)
	}
	log = log.With("payment_intent_id", intent.ID)
	log.InfoContext(ctx, "payment intent created at the provider", "intent", intent)

	return func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
		// The saga's step for PaymentIntentCreated runs here, in the
		// transaction that records the intent (purchase.Saga.Apply): the
		// order and its hold are locked first, as every writer of an
		// order locks them, and an order that failed or was canceled
		// while the intent was being created gets its cancel requested in
		// this commit. The event is written applied (AppliedBy), so the
		// saga's consumer acks it without a transaction of its own, and
		// nothing holds the order's lock when the buyer, who cannot see
		// the client secret before this commit, pays.
		created, _, err := outbox.NewOrderEvent(outbox.TypePaymentIntentCreated, orderID, time.Now(),
			ev.CorrelationID, ev.EventID.String(), outbox.PaymentIntentCreated{
				OrderID: orderID, PaymentIntentID: intent.ID, Status: string(intent.Status),
			})
		if err != nil {
			return err
		}
		created.AppliedBy = purchase.SagaConsumer
		raw, err := json.Marshal(created)
		if err != nil {
			return fmt.Errorf("marshal %s envelope: %w", created.EventType, err)
		}
		err = p.saga.Apply(ctx, tx, created, func(*purchase.OrderTx) error {
			recorded, err := record.Intent(ctx, tx, record.IntentParams{
				OrderID:         orderID,
				Provider:        p.cfg.ProviderName,
				PaymentIntentID: intent.ID,
				ClientSecret:    intent.ClientSecret,
				Status:          string(intent.Status),
				AmountMinor:     intent.AmountMinor,
				Currency:        intent.Currency,
			})
			if err != nil {
				return fmt.Errorf("record payment intent: %w", err)
			}
			if !recorded {
				return errOtherIntent
			}
			return outbox.Insert(ctx, tx, created, raw)
		})
		switch {
		case errors.Is(err, errOtherIntent):
			// The order's row names another intent: the order keeps it.
			// This one's secret went nowhere, so nobody can confirm it; it
			// is left unused.
			log.ErrorContext(ctx, "order already has another payment intent; the new one is left unused")
			return nil
		case errors.Is(err, purchase.ErrOrderNotFound):
			// The order is not in this database. Its events are written
			// with it, so this happens only when the event crossed to a
			// standby's stream and the order did not reach its replica (a
			// failover's recovery point): no retry brings the order
			// back. Dead-letter the command; reconcile reports the intent.
			return fault.Permanent(fmt.Errorf("record payment intent: order %s is not in this database: %w", orderID, err))
		}
		return err
	}, nil
}

// errOtherIntent ends the recording of an intent whose order names
// another one already.
var errOtherIntent = errors.New("order has another payment intent")

// CodeCaptureFailed is purchase.CodeCaptureFailed: the PaymentFailed
// code of a capture the provider refused.
const CodeCaptureFailed = purchase.CodeCaptureFailed

// capture collects an authorized intent. A refusal becomes PaymentFailed,
// which fails the order and releases its seats, unless the provider says
// the intent is captured already (then its webhook brings PaymentCaptured).
func (p *Commands) capture(ctx context.Context, ev outbox.Envelope) (RecordFunc, error) {
	cmd, orderID, log, err := openIntentCommand[outbox.CaptureRequested](p, ev)
	if err != nil {
		return nil, err
	}
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	intent, err := p.cfg.Provider.Capture(callCtx, cmd.PaymentIntentID, "capture:"+orderID.String())
	if err == nil {
		log.InfoContext(ctx, "payment captured at the provider", "intent", intent)
		return p.recordStatus(orderID, intent), nil
	}
	if IsRetryable(err) {
		return nil, p.providerError(ctx, log, "capture", err)
	}
	// Refused. Ask the provider what the intent is now before failing the
	// order: an intent captured already (a repeat after the provider forgot
	// the key, a capture in its dashboard) must not fail a paid order.
	current, getErr := p.cfg.Provider.Get(callCtx, cmd.PaymentIntentID)
	switch {
	case getErr != nil && IsRetryable(getErr):
		return nil, p.providerError(ctx, log, "get intent", getErr)
	case getErr == nil && current.Status == StatusSucceeded:
		log.WarnContext(ctx, "capture refused but the intent is captured already; its webhook brings PaymentCaptured",
			"code", ErrorCode(err), "intent", current)
		return p.recordStatus(orderID, current), nil
	}
	log.WarnContext(ctx, "provider refused the capture; failing the payment", "code", ErrorCode(err), "error", err.Error())
	return func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
		if getErr == nil {
			if err := p.recordStatus(orderID, current)(ctx, tx, ev); err != nil {
				return err
			}
		}
		return p.emit(ctx, tx, ev, outbox.TypePaymentFailed, orderID, outbox.PaymentFailed{
			OrderID: orderID, PaymentIntentID: cmd.PaymentIntentID, Code: CodeCaptureFailed,
		})
	}, nil
}

// cancel releases an authorization. An intent the provider will not cancel
// (canceled already, or captured) needs nothing more from these commands:
// a captured one is refunded when its PaymentCaptured reaches the saga.
func (p *Commands) cancel(ctx context.Context, ev outbox.Envelope) (RecordFunc, error) {
	cmd, orderID, log, err := openIntentCommand[outbox.AuthorizationCancelRequested](p, ev)
	if err != nil {
		return nil, err
	}
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	intent, err := p.cfg.Provider.Cancel(callCtx, cmd.PaymentIntentID, "cancel:"+orderID.String())
	cancel()
	switch {
	case err == nil:
		log.InfoContext(ctx, "payment intent canceled at the provider", "reason", cmd.Reason, "intent", intent)
		return p.recordStatus(orderID, intent), nil
	case ErrorCode(err) == CodeUnexpectedState:
		log.InfoContext(ctx, "payment intent cannot be canceled (canceled already, or captured); nothing to do",
			"reason", cmd.Reason, "error", err.Error())
		return nil, nil
	}
	return nil, p.providerError(ctx, log, "cancel", err)
}

// refund refunds a captured intent, or the amount of one refund of
// selected tickets, once per refund (its idempotency key). The
// charge.refunded webhook brings PaymentRefunded.
func (p *Commands) refund(ctx context.Context, ev outbox.Envelope) (RecordFunc, error) {
	cmd, orderID, log, err := openIntentCommand[outbox.RefundRequested](p, ev)
	if err != nil {
		return nil, err
	}
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	key := "refund:" + orderID.String()
	if cmd.RefundID != uuid.Nil {
		key = "refund:" + cmd.RefundID.String()
	}
	ref, err := p.cfg.Provider.Refund(callCtx, cmd.PaymentIntentID, cmd.AmountMinor, key)
	cancel()
	switch {
	case err == nil:
		log.InfoContext(ctx, "payment refunded at the provider", "reason", cmd.Reason,
			"refund_id", ref.ID, "amount_minor", ref.AmountMinor, "currency", ref.Currency, "refund_status", ref.Status)
		return nil, nil
	case ErrorCode(err) == CodeChargeAlreadyRefunded:
		log.InfoContext(ctx, "payment refunded already; nothing to do", "reason", cmd.Reason)
		return nil, nil
	}
	return nil, p.providerError(ctx, log, "refund", err)
}

// recordStatus returns the in-transaction step that mirrors the provider's
// status of the order's intent in its payments row. The write goes with
// the commit (db.Deferring), and skips a row another transaction is
// writing (record.MirrorStatus): the provider's webhook for the same
// intent, applied at the same moment by the ingress under the order's
// lock (a capture's webhook also tickets the order), writes the same row
// with the same fact, and waiting for it only held this consumer's
// connection. An order without the row (never the case for an intent this
// consumer created) is left as it is.
func (p *Commands) recordStatus(orderID uuid.UUID, intent Intent) RecordFunc {
	return func(ctx context.Context, tx pgx.Tx, _ outbox.Envelope) error {
		if _, err := record.MirrorStatus(ctx, db.Deferring(tx), orderID, intent.ID, string(intent.Status)); err != nil {
			return fmt.Errorf("record payment status: %w", err)
		}
		return nil
	}
}

// providerError is what Call returns for a failed provider call: the
// error itself when it is retryable (the runtime naks it with backoff; the
// same key makes the repeat safe), else the error marked permanent (dead
// letter), logged here with the event's attributes. Provider errors hold
// no secrets.
func (p *Commands) providerError(ctx context.Context, log *slog.Logger, op string, err error) error {
	if IsRetryable(err) {
		return err
	}
	log.ErrorContext(ctx, "provider refused the "+op+"; dead-lettering the command",
		"code", ErrorCode(err), "error", err.Error())
	return fault.Permanent(err)
}

// eventLogger scopes the commands' logger to one command.
func (p *Commands) eventLogger(ev outbox.Envelope, orderID uuid.UUID, intentID string) *slog.Logger {
	l := p.logger.With("event_id", ev.EventID, "event_type", ev.EventType, "order_id", orderID,
		"correlation_id", ev.CorrelationID, "causation_id", ev.CausationID)
	if intentID != "" {
		l = l.With("payment_intent_id", intentID)
	}
	return l
}

// intentCommand is a command on an order's existing PaymentIntent:
// capture, cancel or refund.
type intentCommand interface {
	Intent() (orderID uuid.UUID, paymentIntentID string)
}

// openIntentCommand is the opening the commands on an existing intent
// share: it decodes ev's payload and returns it with the order it is for
// (the event's aggregate when the payload names none) and the command's
// logger. A payload that does not decode or names no intent can never be
// handled: the error is permanent.
func openIntentCommand[T intentCommand](p *Commands, ev outbox.Envelope) (cmd T, orderID uuid.UUID, log *slog.Logger, err error) {
	cmd, err = paymentPayload[T](ev)
	if err != nil {
		return cmd, uuid.Nil, nil, err
	}
	orderID, intentID := cmd.Intent()
	orderID = cmp.Or(orderID, ev.AggregateID)
	if intentID == "" {
		return cmd, orderID, nil, fault.Permanent(fmt.Errorf("%s names no payment intent", ev.EventType))
	}
	return cmd, orderID, p.eventLogger(ev, orderID, intentID), nil
}

// paymentPayload decodes ev's payload. A payload that does not decode can
// never be handled: the error is permanent, and quotes nothing of it.
func paymentPayload[T any](ev outbox.Envelope) (T, error) {
	var v T
	if err := json.Unmarshal(ev.Payload, &v); err != nil {
		return v, fault.Permanent(fmt.Errorf("%s payload does not decode", ev.EventType))
	}
	return v, nil
}

// emit writes the event that follows cause to the outbox in tx: same
// correlation id, cause's event id as causation id.
func (p *Commands) emit(ctx context.Context, tx pgx.Tx, cause outbox.Envelope, eventType string, orderID uuid.UUID, payload any) error {
	env, raw, err := outbox.NewOrderEvent(eventType, orderID, time.Now(), cause.CorrelationID, cause.EventID.String(), payload)
	if err != nil {
		return err
	}
	return outbox.Insert(ctx, tx, env, raw)
}
