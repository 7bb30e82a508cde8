package webhooks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/platform/page"
	"boxoffice/platform/sliceutil"
	"boxoffice/sqlcgen"
)

// ErrNotFound is returned for an endpoint or message that does not exist
// or belongs to another organizer: the two are indistinguishable.
var ErrNotFound = fault.New(fault.CodeNotFound, "not found")

// ErrEndpointDisabled is returned when an operation needs an enabled
// endpoint (recover, replay to one endpoint).
var ErrEndpointDisabled = fault.New(fault.CodeConflict, "endpoint is disabled")

// ErrInvalidWindow is returned by Recover when its window ends before it
// starts (Until not after Since). Nothing was queued.
var ErrInvalidWindow = fault.New(fault.CodeInvalid, "until must be after since")

// ErrEndpointLimit is returned by Create when the organizer already has
// the most endpoints allowed (ServiceConfig.MaxEndpoints), enabled or not.
// Nothing was written.
var ErrEndpointLimit = fault.New(fault.CodeConflict, "webhook endpoint limit reached")

// ErrDuplicateURL is returned by Create and Update when another endpoint
// of the organizer, enabled or not, already has the URL (compared in the
// form URLKey gives). Nothing was written.
var ErrDuplicateURL = fault.New(fault.CodeConflict, "another endpoint has this url")

// ValidationError says which input is wrong and how
// (fault.ValidationError). Nothing was written.
type ValidationError = fault.ValidationError

// Limits of endpoint settings.
const (
	MaxEventTypeFilters = 20
	MaxDescription      = 500
	MaxConcurrencyLimit = 1000
	MaxRateLimit        = 10000
	// DefaultMaxConcurrency is an endpoint's concurrency unless set.
	DefaultMaxConcurrency = 10
	// DefaultMaxEndpoints is how many endpoints an organizer may have
	// unless ServiceConfig.MaxEndpoints says otherwise.
	DefaultMaxEndpoints = 20
)

// Service is what the organizer API does with endpoints and messages.
// Every method is scoped to one organizer: another organizer's resources
// are ErrNotFound. Secrets appear only in what Create and RotateSecret
// return; Service never logs them.
type Service struct {
	pool         *pgxpool.Pool
	guard        *Guard
	keys         *Keyring
	maxEndpoints int
	logger       *slog.Logger
	q            *sqlcgen.Queries
}

// ServiceConfig configures a Service.
type ServiceConfig struct {
	// Guard vets endpoint URLs (SSRF). Defaults to a Guard that allows
	// public https URLs only.
	Guard *Guard
	// Keys seals the secrets Create and RotateSecret make before they are
	// stored. Required: NewService panics without it.
	Keys *Keyring
	// MaxEndpoints caps one organizer's endpoints, enabled and disabled
	// alike (a disabled one can be enabled again): every endpoint
	// multiplies each of the organizer's events into one more delivery.
	// Zero or less means the default. Defaults to 20.
	MaxEndpoints int
	// Logger logs changes to endpoints. Required.
	Logger *slog.Logger
}

// read is the pool for sqlcgen's statements outside a transaction, their
// errors interpreted (db.Interpreting): a missing row is db.ErrNotFound, a
// unique violation db.ErrConflict.
func (s *Service) read() db.DBTX { return db.Interpreting(s.pool) }

// NewService returns a Service on pool. It panics when cfg.Keys or
// cfg.Logger is nil (a wiring mistake: no secret may be stored unsealed).
func NewService(pool *pgxpool.Pool, cfg ServiceConfig) *Service {
	if cfg.Keys == nil || cfg.Logger == nil {
		panic("webhooks.NewService: Keys and Logger are required")
	}
	if cfg.Guard == nil {
		cfg.Guard = &Guard{}
	}
	if cfg.MaxEndpoints <= 0 {
		cfg.MaxEndpoints = DefaultMaxEndpoints
	}
	return &Service{
		pool: pool, guard: cfg.Guard, keys: cfg.Keys, maxEndpoints: cfg.MaxEndpoints,
		logger: cfg.Logger.With("component", "webhooks"), q: sqlcgen.New(),
	}
}

// Keyring is what seals the service's secrets at rest; it seals other
// answers that carry one too (an idempotent request's stored answer).
func (s *Service) Keyring() *Keyring { return s.keys }

// MaxEndpoints is how many endpoints one organizer may have.
func (s *Service) MaxEndpoints() int { return s.maxEndpoints }

// Endpoint is an endpoint as the organizer sees it. Secret is set only in
// what Create and RotateSecret return.
type Endpoint struct {
	ID                 uuid.UUID
	OrganizerID        uuid.UUID
	URL                string
	Description        string
	EventTypes         []string
	Enabled            bool
	DisabledReason     string
	RateLimitPerSecond *int32
	MaxConcurrency     int32
	// PayloadVersion is how the messages sent to it spell their fields:
	// PayloadV1 (snake_case) or PayloadV2 (camelCase).
	PayloadVersion int
	// CircuitState is the breaker's state: closed, open (nothing is sent
	// until CircuitOpenUntil) or half_open (one probe at a time).
	CircuitState string
	// CircuitOpenUntil is when an open circuit lets a probe through.
	CircuitOpenUntil *time.Time
	// ConsecutiveFailures is the failure streak: retryable failures since
	// the last success.
	ConsecutiveFailures int32
	FailingSince        *time.Time
	// LastSuccessAt is when a delivery to it last succeeded, to within
	// 10 seconds; nil before the first.
	LastSuccessAt *time.Time
	// DisabledAt is when it was disabled; nil while enabled.
	DisabledAt *time.Time
	CreatedAt  time.Time
	UpdatedAt  time.Time
	Secret     string
}

// Cursor is the position of e in a list of endpoints (List).
func (e Endpoint) Cursor() page.Cursor { return page.Cursor{CreatedAt: e.CreatedAt, ID: e.ID} }

func endpointOf(e sqlcgen.WebhookEndpoint) Endpoint {
	out := Endpoint{
		ID: e.ID, OrganizerID: e.OrganizerID, URL: e.Url, Description: e.Description,
		EventTypes: nonNilStrings(e.EventTypes), Enabled: e.Enabled, RateLimitPerSecond: e.RateLimitPerSecond,
		MaxConcurrency: e.MaxConcurrency, CircuitState: circuitClosed, ConsecutiveFailures: e.ConsecutiveFailures,
		FailingSince: e.FailingSince, LastSuccessAt: e.LastSuccessAt, DisabledAt: e.DisabledAt,
		CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt, PayloadVersion: int(e.PayloadVersion),
	}
	if e.DisabledReason != nil {
		out.DisabledReason = *e.DisabledReason
	}
	if e.CircuitState == circuitOpen {
		out.CircuitState = circuitOpen
		out.CircuitOpenUntil = e.CircuitOpenUntil
		if e.CircuitOpenUntil != nil && !time.Now().Before(*e.CircuitOpenUntil) {
			out.CircuitState = circuitHalfOpen
		}
	}
	return out
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// EndpointParams creates an endpoint.
type EndpointParams struct {
	URL         string
	Description string
	// EventTypes filters what is delivered; empty means every type.
	EventTypes []string
	// Disabled creates the endpoint disabled.
	Disabled bool
	// RateLimitPerSecond caps deliveries per second; nil is unlimited.
	RateLimitPerSecond *int32
	// MaxConcurrency caps attempts in flight. Defaults to 10.
	MaxConcurrency int32
	// PayloadVersion is PayloadV1 or PayloadV2; 0 means PayloadV1, the
	// default of API version 1 (docs/versioning.md).
	PayloadVersion int
}

// EndpointUpdate changes an endpoint; nil fields stay as they are.
type EndpointUpdate struct {
	URL            *string
	Description    *string
	EventTypes     *[]string
	Enabled        *bool
	MaxConcurrency *int32
	PayloadVersion *int
	// SetRateLimit sets the rate limit to RateLimitPerSecond (nil:
	// unlimited); without it the limit stays.
	SetRateLimit       bool
	RateLimitPerSecond *int32
}

// checkURL vets raw and returns its URLKey.
func (s *Service) checkURL(ctx context.Context, raw string) (string, error) {
	u, err := s.guard.CheckURL(ctx, raw)
	if err != nil {
		if errors.Is(err, ErrRefusedURL) {
			return "", &ValidationError{Location: "body.url", Message: err.Error()}
		}
		return "", &ValidationError{Location: "body.url", Message: "the host could not be resolved"}
	}
	return URLKey(u), nil
}

func checkEventTypes(types []string) error {
	if len(types) > MaxEventTypeFilters {
		return &ValidationError{Location: "body.eventTypes", Message: fmt.Sprintf("at most %d event types", MaxEventTypeFilters)}
	}
	for _, t := range types {
		if !IsSubscribable(t) {
			return &ValidationError{Location: "body.eventTypes", Message: fmt.Sprintf("unknown event type %q", t)}
		}
	}
	return nil
}

func checkPayloadVersion(v *int) error {
	if v != nil && !ValidPayloadVersion(*v) {
		return &ValidationError{Location: "body.payloadVersion", Message: "must be 1 (snake_case) or 2 (camelCase)"}
	}
	return nil
}

func checkLimits(rate, concurrency *int32) error {
	if rate != nil && (*rate < 1 || *rate > MaxRateLimit) {
		return &ValidationError{Location: "body.rateLimitPerSecond", Message: fmt.Sprintf("must be from 1 to %d", MaxRateLimit)}
	}
	if concurrency != nil && (*concurrency < 1 || *concurrency > MaxConcurrencyLimit) {
		return &ValidationError{Location: "body.maxConcurrency", Message: fmt.Sprintf("must be from 1 to %d", MaxConcurrencyLimit)}
	}
	return nil
}

func dedupe(types []string) []string {
	out := slices.Clone(types)
	slices.Sort(out)
	return slices.Compact(out)
}

// Create validates p, vets its URL, and creates the endpoint with a fresh
// secret, returned once in Endpoint.Secret. Returns a *ValidationError for
// bad input or a refused URL, ErrEndpointLimit when the organizer has
// MaxEndpoints already, ErrDuplicateURL when another of its endpoints has
// the URL; nothing is written then. Concurrent creates of one organizer
// are serialised, so the limit holds among them too.
func (s *Service) Create(ctx context.Context, organizerID uuid.UUID, p EndpointParams) (Endpoint, error) {
	return s.create(ctx, s.pool, organizerID, p)
}

// CreateTx is Create in the caller's transaction tx (as a savepoint of
// it): the endpoint exists once tx commits.
func (s *Service) CreateTx(ctx context.Context, tx pgx.Tx, organizerID uuid.UUID, p EndpointParams) (Endpoint, error) {
	return s.create(ctx, tx, organizerID, p)
}

func (s *Service) create(ctx context.Context, on db.Executor, organizerID uuid.UUID, p EndpointParams) (Endpoint, error) {
	if p.MaxConcurrency == 0 {
		p.MaxConcurrency = DefaultMaxConcurrency
	}
	if p.PayloadVersion == 0 {
		p.PayloadVersion = PayloadV1
	}
	if len(p.Description) > MaxDescription {
		return Endpoint{}, &ValidationError{Location: "body.description", Message: "at most 500 bytes"}
	}
	if err := errors.Join(checkEventTypes(p.EventTypes), checkLimits(p.RateLimitPerSecond, &p.MaxConcurrency),
		checkPayloadVersion(&p.PayloadVersion)); err != nil {
		return Endpoint{}, firstValidation(err)
	}
	key, err := s.checkURL(ctx, p.URL)
	if err != nil {
		return Endpoint{}, err
	}
	secret, err := NewSecret()
	if err != nil {
		return Endpoint{}, err
	}
	id := uuid.Must(uuid.NewV7())
	sealed, err := s.keys.Seal(id, secret)
	if err != nil {
		return Endpoint{}, err
	}
	row, err := db.WithTxV(ctx, on, func(ctx context.Context, tx pgx.Tx) (sqlcgen.WebhookEndpoint, error) {
		if err := s.q.WebhookEndpointLockOrganizer(ctx, tx, organizerID); err != nil {
			return sqlcgen.WebhookEndpoint{}, fmt.Errorf("lock organizer's endpoints: %w", err)
		}
		n, err := s.q.WebhookEndpointCountByOrganizer(ctx, tx, organizerID)
		if err != nil {
			return sqlcgen.WebhookEndpoint{}, fmt.Errorf("count webhook endpoints: %w", err)
		}
		if int(n) >= s.maxEndpoints {
			return sqlcgen.WebhookEndpoint{}, fmt.Errorf("%w: at most %d", ErrEndpointLimit, s.maxEndpoints)
		}
		return s.q.WebhookEndpointInsert(ctx, tx, sqlcgen.WebhookEndpointInsertParams{
			ID: id, OrganizerID: organizerID, Url: p.URL, UrlKey: key, Description: p.Description,
			EventTypes: nonNilStrings(dedupe(p.EventTypes)), Enabled: !p.Disabled,
			RateLimitPerSecond: p.RateLimitPerSecond, MaxConcurrency: p.MaxConcurrency, Secret: sealed,
			PayloadVersion: int16(p.PayloadVersion),
		})
	})
	switch {
	case errors.Is(err, ErrEndpointLimit):
		return Endpoint{}, err
	case errors.Is(err, db.ErrConflict): // the only unique key besides a fresh id
		return Endpoint{}, ErrDuplicateURL
	case err != nil:
		return Endpoint{}, fmt.Errorf("insert webhook endpoint: %w", err)
	}
	s.logger.InfoContext(ctx, "webhook endpoint created", "endpoint_id", row.ID.String(), "organizer_id", organizerID.String())
	e := endpointOf(row)
	e.Secret = secret
	return e, nil
}

func firstValidation(err error) error {
	var v *ValidationError
	if errors.As(err, &v) {
		return v
	}
	return err
}

// List returns up to limit of the organizer's endpoints, oldest first,
// after the cursor when one is given.
func (s *Service) List(ctx context.Context, organizerID uuid.UUID, after *page.Cursor, limit int) ([]Endpoint, error) {
	p := sqlcgen.WebhookEndpointListParams{OrganizerID: organizerID, MaxRows: int32(limit)}
	if after != nil {
		p.AfterCreatedAt, p.AfterID = &after.CreatedAt, &after.ID
	}
	rows, err := s.q.WebhookEndpointList(ctx, s.read(), p)
	if err != nil {
		return nil, fmt.Errorf("list webhook endpoints: %w", err)
	}
	return sliceutil.Map(rows, endpointOf), nil
}

// Get returns one of the organizer's endpoints, or ErrNotFound.
func (s *Service) Get(ctx context.Context, organizerID, id uuid.UUID) (Endpoint, error) {
	row, err := s.q.WebhookEndpointGet(ctx, s.read(), sqlcgen.WebhookEndpointGetParams{ID: id, OrganizerID: organizerID})
	switch {
	case errors.Is(err, db.ErrNotFound):
		return Endpoint{}, ErrNotFound
	case err != nil:
		return Endpoint{}, fmt.Errorf("get webhook endpoint: %w", err)
	}
	return endpointOf(row), nil
}

// Update applies u to one of the organizer's endpoints. Disabling stops
// its pending deliveries (kept as failed, for recover); enabling clears
// its failure record and circuit. Returns ErrNotFound, or with nothing
// written a *ValidationError, or ErrDuplicateURL when another endpoint of
// the organizer has the new URL.
func (s *Service) Update(ctx context.Context, organizerID, id uuid.UUID, u EndpointUpdate) (Endpoint, error) {
	if u.Description != nil && len(*u.Description) > MaxDescription {
		return Endpoint{}, &ValidationError{Location: "body.description", Message: "at most 500 bytes"}
	}
	var rate *int32
	if u.SetRateLimit {
		rate = u.RateLimitPerSecond
	}
	var types []string
	if u.EventTypes != nil {
		types = *u.EventTypes
	}
	if err := errors.Join(checkEventTypes(types), checkLimits(rate, u.MaxConcurrency), checkPayloadVersion(u.PayloadVersion)); err != nil {
		return Endpoint{}, firstValidation(err)
	}
	var key *string
	if u.URL != nil {
		k, err := s.checkURL(ctx, *u.URL)
		if err != nil {
			return Endpoint{}, err
		}
		key = &k
	}
	p := sqlcgen.WebhookEndpointUpdateParams{
		ID: id, OrganizerID: organizerID, Url: u.URL, UrlKey: key, Description: u.Description, MaxConcurrency: u.MaxConcurrency,
		SetRateLimit: u.SetRateLimit, RateLimitPerSecond: u.RateLimitPerSecond, Enabled: u.Enabled,
	}
	if u.EventTypes != nil {
		p.EventTypes = nonNilStrings(dedupe(*u.EventTypes))
	}
	if u.PayloadVersion != nil {
		v := int16(*u.PayloadVersion)
		p.PayloadVersion = &v
	}
	row, err := db.WithTxV(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) (sqlcgen.WebhookEndpoint, error) {
		row, err := s.q.WebhookEndpointUpdate(ctx, tx, p)
		if err != nil {
			return row, err
		}
		if !row.Enabled {
			if _, err := s.q.WebhookDeliveryFailPendingByEndpoint(ctx, tx, row.ID); err != nil {
				return row, fmt.Errorf("stop deliveries of disabled endpoint: %w", err)
			}
		}
		return row, nil
	})
	switch {
	case errors.Is(err, db.ErrNotFound):
		return Endpoint{}, ErrNotFound
	case errors.Is(err, db.ErrConflict):
		return Endpoint{}, ErrDuplicateURL
	case err != nil:
		return Endpoint{}, fmt.Errorf("update webhook endpoint: %w", err)
	}
	s.logger.InfoContext(ctx, "webhook endpoint updated", "endpoint_id", id.String(), "organizer_id", organizerID.String(), "enabled", row.Enabled)
	return endpointOf(row), nil
}

// Delete deletes one of the organizer's endpoints with its deliveries;
// messages and their attempt history stay until retention. Returns
// ErrNotFound.
func (s *Service) Delete(ctx context.Context, organizerID, id uuid.UUID) error {
	n, err := s.q.WebhookEndpointDelete(ctx, s.read(), sqlcgen.WebhookEndpointDeleteParams{ID: id, OrganizerID: organizerID})
	if err != nil {
		return fmt.Errorf("delete webhook endpoint: %w", err)
	}
	if n == 0 {
		return ErrNotFound
	}
	s.logger.InfoContext(ctx, "webhook endpoint deleted", "endpoint_id", id.String(), "organizer_id", organizerID.String())
	return nil
}

// RotateSecret gives the endpoint a fresh secret, returned once in
// Endpoint.Secret. The secret it replaces keeps signing beside it (two
// signatures per delivery) for PreviousSecretOverlap. Returns ErrNotFound.
func (s *Service) RotateSecret(ctx context.Context, organizerID, id uuid.UUID) (Endpoint, error) {
	return s.rotateSecret(ctx, s.read(), organizerID, id)
}

// RotateSecretTx is RotateSecret in the caller's transaction tx: the new
// secret signs once tx commits.
func (s *Service) RotateSecretTx(ctx context.Context, tx pgx.Tx, organizerID, id uuid.UUID) (Endpoint, error) {
	return s.rotateSecret(ctx, db.Interpreting(tx), organizerID, id)
}

func (s *Service) rotateSecret(ctx context.Context, on db.DBTX, organizerID, id uuid.UUID) (Endpoint, error) {
	secret, err := NewSecret()
	if err != nil {
		return Endpoint{}, err
	}
	sealed, err := s.keys.Seal(id, secret)
	if err != nil {
		return Endpoint{}, err
	}
	row, err := s.q.WebhookEndpointRotateSecret(ctx, on, sqlcgen.WebhookEndpointRotateSecretParams{
		ID: id, OrganizerID: organizerID, Secret: sealed, Overlap: PreviousSecretOverlap,
	})
	switch {
	case errors.Is(err, db.ErrNotFound):
		return Endpoint{}, ErrNotFound
	case err != nil:
		return Endpoint{}, fmt.Errorf("rotate webhook secret: %w", err)
	}
	s.logger.InfoContext(ctx, "webhook endpoint secret rotated", "endpoint_id", id.String(), "organizer_id", organizerID.String())
	e := endpointOf(row)
	e.Secret = secret
	return e, nil
}

// RedeliveryRequest says who asked for a recover or a replay, and why:
// both are stored with the request in webhook_redeliveries.
type RedeliveryRequest struct {
	// RequestedBy names who asked: "user:<id>" or "api_key:<id>"; empty is
	// stored as "unknown" (a program of this repository, not the API).
	RequestedBy string
	// Reason is why, as given (at most 500 characters; may be empty).
	Reason string
}

// requester is who asked, as stored and logged.
func (r RedeliveryRequest) requester() string { return cmp.Or(r.RequestedBy, "unknown") }

// RecoverParams says which deliveries a recover queues again, and who
// asked for it and why.
type RecoverParams struct {
	// Since and Until bound the deliveries' creation: [Since, Until),
	// Until nil meaning up to now.
	Since time.Time
	Until *time.Time
	RedeliveryRequest
}

// Recover queues again every failed, dead or needs_review delivery of one
// of the organizer's endpoints created in [p.Since, p.Until), with trigger
// recover and a fresh retry schedule, and records who asked and why in the
// same statement. It is how deliveries that need review are retried once
// the receiver is fixed. Two concurrent recovers queue each delivery once
// (the second finds it pending). Returns how many, ErrNotFound,
// ErrEndpointDisabled, or ErrInvalidWindow.
func (s *Service) Recover(ctx context.Context, organizerID, id uuid.UUID, p RecoverParams) (int64, error) {
	return s.recoverDeliveries(ctx, s.read(), organizerID, id, p)
}

// RecoverTx is Recover in the caller's transaction tx: the deliveries are queued once tx commits.
func (s *Service) RecoverTx(ctx context.Context, tx pgx.Tx, organizerID, id uuid.UUID, p RecoverParams) (int64, error) {
	return s.recoverDeliveries(ctx, db.Interpreting(tx), organizerID, id, p)
}

func (s *Service) recoverDeliveries(ctx context.Context, on db.DBTX, organizerID, id uuid.UUID, p RecoverParams) (int64, error) {
	if p.Until != nil && !p.Until.After(p.Since) {
		return 0, ErrInvalidWindow
	}
	e, err := s.Get(ctx, organizerID, id)
	if err != nil {
		return 0, err
	}
	if !e.Enabled {
		return 0, ErrEndpointDisabled
	}
	n, err := s.q.WebhookDeliveryRecover(ctx, on, sqlcgen.WebhookDeliveryRecoverParams{
		ID: uuid.Must(uuid.NewV7()), EndpointID: id, OrganizerID: organizerID, Since: p.Since, Until: p.Until,
		RequestedBy: p.requester(), Reason: p.Reason,
	})
	if err != nil {
		return 0, fmt.Errorf("recover webhook deliveries: %w", err)
	}
	s.logger.InfoContext(ctx, "webhook deliveries recovered", "endpoint_id", id.String(), "organizer_id", organizerID.String(),
		"deliveries", n, "requested_by", p.requester())
	return n, nil
}

// Message is a stored message as the organizer sees it, with its
// deliveries (Messages fills them; other methods leave them nil).
type Message struct {
	ID         uuid.UUID
	EventType  string
	Payload    []byte
	CreatedAt  time.Time
	Deliveries []MessageDelivery
}

// Cursor is the position of m in a list of messages (Messages).
func (m Message) Cursor() page.Cursor { return page.Cursor{CreatedAt: m.CreatedAt, ID: m.ID} }

// Delivery statuses as the API states them (MessageDelivery.Status):
// DeliverySucceeded; DeliveryPending, not attempted since it was queued,
// replayed or recovered; DeliveryFailed, its last attempt failed and it
// will be retried; DeliveryNeedsReview, the endpoint gave a terminal
// answer and it waits for a recover or a replay; DeliveryDead, it will
// not be sent again unless replayed or recovered (its retries were used
// up, the endpoint answered 410, or its endpoint was disabled).
const (
	DeliverySucceeded   = "succeeded"
	DeliveryPending     = "pending"
	DeliveryFailed      = "failed"
	DeliveryNeedsReview = "needs_review"
	DeliveryDead        = "dead"
)

// DeliveryStatuses lists the statuses a MessageFilter may ask for.
var DeliveryStatuses = []string{DeliverySucceeded, DeliveryPending, DeliveryFailed, DeliveryNeedsReview, DeliveryDead}

// MessageDelivery is one endpoint's delivery of a message.
type MessageDelivery struct {
	EndpointID uuid.UUID
	// Status is DeliverySucceeded, DeliveryPending, DeliveryFailed,
	// DeliveryNeedsReview or DeliveryDead.
	Status   string
	Attempts int32
	// LastError is the last failed attempt's error class (with its status
	// code), or "" after a success.
	LastError string
	// NextAttemptAt is when a pending or failed delivery is due.
	NextAttemptAt *time.Time
	// AcknowledgedAt is when the endpoint first answered 2xx to it.
	AcknowledgedAt *time.Time
	UpdatedAt      time.Time
}

// MessageFilter selects messages. Zero fields do not filter.
type MessageFilter struct {
	EventType string
	Since     time.Time
	// Status keeps the messages with a delivery in that status (one of
	// DeliveryStatuses); with EndpointID, a delivery to that endpoint.
	Status string
	// EndpointID keeps the messages with a delivery to that endpoint.
	EndpointID *uuid.UUID
	Before     *page.Cursor
	Limit      int
}

// Messages returns the organizer's messages, newest first, each with its
// deliveries (by endpoint id).
func (s *Service) Messages(ctx context.Context, organizerID uuid.UUID, f MessageFilter) ([]Message, error) {
	p := sqlcgen.WebhookMessageListParams{OrganizerID: organizerID, MaxRows: int32(f.Limit), EndpointID: f.EndpointID}
	if f.EventType != "" {
		p.EventType = &f.EventType
	}
	if f.Status != "" {
		p.Status = &f.Status
	}
	if !f.Since.IsZero() {
		p.Since = &f.Since
	}
	if f.Before != nil {
		p.BeforeCreatedAt, p.BeforeID = &f.Before.CreatedAt, &f.Before.ID
	}
	rows, err := s.q.WebhookMessageList(ctx, s.read(), p)
	if err != nil {
		return nil, fmt.Errorf("list webhook messages: %w", err)
	}
	out := make([]Message, len(rows))
	ids := make([]uuid.UUID, len(rows))
	at := make(map[uuid.UUID]int, len(rows))
	for i, r := range rows {
		out[i] = Message{ID: r.ID, EventType: r.EventType, Payload: r.Payload, CreatedAt: r.CreatedAt, Deliveries: []MessageDelivery{}}
		ids[i], at[r.ID] = r.ID, i
	}
	if len(rows) == 0 {
		return out, nil
	}
	ds, err := s.q.WebhookDeliveryListByMessages(ctx, s.read(), sqlcgen.WebhookDeliveryListByMessagesParams{
		MessageIds: ids, OrganizerID: organizerID,
	})
	if err != nil {
		return nil, fmt.Errorf("list webhook deliveries: %w", err)
	}
	for _, d := range ds {
		md := MessageDelivery{
			EndpointID: d.EndpointID, Status: d.Status, Attempts: d.Attempts, AcknowledgedAt: d.AcknowledgedAt, UpdatedAt: d.UpdatedAt,
		}
		if d.LastError != nil && d.Status != DeliverySucceeded {
			md.LastError = *d.LastError
		}
		if d.Status == DeliveryPending || d.Status == DeliveryFailed {
			md.NextAttemptAt = d.NextAttemptAt
		}
		m := &out[at[d.MessageID]]
		m.Deliveries = append(m.Deliveries, md)
	}
	return out, nil
}

// SendTest queues a signed webhook.test message for one of the
// organizer's endpoints only, due at once, through the same dispatcher,
// signing, retries and attempt log as every other message (its data is
// WebhookTestData). Returns the message, ErrNotFound, or
// ErrEndpointDisabled.
func (s *Service) SendTest(ctx context.Context, organizerID, endpointID uuid.UUID) (Message, error) {
	return s.sendTest(ctx, s.read(), organizerID, endpointID)
}

// SendTestTx is SendTest in the caller's transaction tx: the test is queued once tx commits.
func (s *Service) SendTestTx(ctx context.Context, tx pgx.Tx, organizerID, endpointID uuid.UUID) (Message, error) {
	return s.sendTest(ctx, db.Interpreting(tx), organizerID, endpointID)
}

func (s *Service) sendTest(ctx context.Context, on db.DBTX, organizerID, endpointID uuid.UUID) (Message, error) {
	e, err := s.Get(ctx, organizerID, endpointID)
	if err != nil {
		return Message{}, err
	}
	if !e.Enabled {
		return Message{}, ErrEndpointDisabled
	}
	now := time.Now()
	body, err := encodeBody(EventWebhookTest, now, WebhookTestData{EndpointID: endpointID, Message: testMessage})
	if err != nil {
		return Message{}, err
	}
	row, err := s.q.WebhookTestInsert(ctx, on, sqlcgen.WebhookTestInsertParams{
		ID: uuid.Must(uuid.NewV7()), OrganizerID: organizerID, EndpointID: endpointID, Payload: body, CreatedAt: now,
	})
	switch {
	case errors.Is(err, db.ErrNotFound): // disabled or deleted since Get
		return Message{}, ErrEndpointDisabled
	case err != nil:
		return Message{}, fmt.Errorf("queue webhook test: %w", err)
	}
	s.logger.InfoContext(ctx, "webhook test queued", "msg_id", MessageID(row.ID), "endpoint_id", endpointID.String(), "organizer_id", organizerID.String())
	return Message{ID: row.ID, EventType: EventWebhookTest, Payload: body, CreatedAt: row.CreatedAt, Deliveries: []MessageDelivery{{
		EndpointID: endpointID, Status: DeliveryPending, NextAttemptAt: &row.CreatedAt, UpdatedAt: row.CreatedAt,
	}}}, nil
}

// Attempt is one recorded try of a message to an endpoint.
type Attempt struct {
	ID           int64
	DeliveryID   uuid.UUID
	EndpointID   uuid.UUID
	Number       int32
	Trigger      string
	StatusCode   *int32
	LatencyMs    int32
	ErrorClass   string
	ResponseBody string
	CreatedAt    time.Time
}

// Attempts returns every attempt of one of the organizer's messages,
// oldest first, or ErrNotFound.
func (s *Service) Attempts(ctx context.Context, organizerID, messageID uuid.UUID) ([]Attempt, error) {
	if _, err := s.message(ctx, organizerID, messageID); err != nil {
		return nil, err
	}
	rows, err := s.q.WebhookAttemptListByMessage(ctx, s.read(), sqlcgen.WebhookAttemptListByMessageParams{
		MessageID: messageID, OrganizerID: organizerID,
	})
	if err != nil {
		return nil, fmt.Errorf("list webhook attempts: %w", err)
	}
	out := make([]Attempt, len(rows))
	for i, r := range rows {
		out[i] = Attempt{
			ID: r.ID, DeliveryID: r.DeliveryID, EndpointID: r.EndpointID, Number: r.Number, Trigger: r.Trigger,
			StatusCode: r.StatusCode, LatencyMs: r.LatencyMs, ErrorClass: r.ErrorClass, ResponseBody: r.ResponseBody,
			CreatedAt: r.CreatedAt,
		}
	}
	return out, nil
}

func (s *Service) message(ctx context.Context, organizerID, id uuid.UUID) (sqlcgen.WebhookMessageGetRow, error) {
	m, err := s.q.WebhookMessageGet(ctx, s.read(), sqlcgen.WebhookMessageGetParams{ID: id, OrganizerID: organizerID})
	switch {
	case errors.Is(err, db.ErrNotFound):
		return m, ErrNotFound
	case err != nil:
		return m, fmt.Errorf("get webhook message: %w", err)
	}
	return m, nil
}

// ReplayParams says where a replay goes, and who asked for it and why.
type ReplayParams struct {
	// EndpointID, when set, replays to that endpoint only.
	EndpointID *uuid.UUID
	RedeliveryRequest
}

// Replay queues one of the organizer's messages again, unchanged and with
// the same webhook-id: to every enabled endpoint it was delivered to, or
// to p.EndpointID when given (an endpoint of the same organizer, which
// need not have had it), whatever the delivery's status (a needs_review
// one included). The next attempt of each is recorded with trigger
// replay; who asked and why is recorded in the same statement. Returns how
// many deliveries were queued, ErrNotFound (message or endpoint), or
// ErrEndpointDisabled.
func (s *Service) Replay(ctx context.Context, organizerID, messageID uuid.UUID, p ReplayParams) (int64, error) {
	return s.replayMessage(ctx, s.read(), organizerID, messageID, p)
}

// ReplayTx is Replay in the caller's transaction tx: the deliveries are queued once tx commits.
func (s *Service) ReplayTx(ctx context.Context, tx pgx.Tx, organizerID, messageID uuid.UUID, p ReplayParams) (int64, error) {
	return s.replayMessage(ctx, db.Interpreting(tx), organizerID, messageID, p)
}

func (s *Service) replayMessage(ctx context.Context, on db.DBTX, organizerID, messageID uuid.UUID, p ReplayParams) (int64, error) {
	if _, err := s.message(ctx, organizerID, messageID); err != nil {
		return 0, err
	}
	if p.EndpointID != nil {
		e, err := s.Get(ctx, organizerID, *p.EndpointID)
		if err != nil {
			return 0, err
		}
		if !e.Enabled {
			return 0, ErrEndpointDisabled
		}
	}
	n, err := s.q.WebhookDeliveryReplay(ctx, on, sqlcgen.WebhookDeliveryReplayParams{
		ID: uuid.Must(uuid.NewV7()), MessageID: messageID, OrganizerID: organizerID, EndpointID: p.EndpointID,
		RequestedBy: p.requester(), Reason: p.Reason,
	})
	if err != nil {
		return 0, fmt.Errorf("replay webhook message: %w", err)
	}
	s.logger.InfoContext(ctx, "webhook message replayed", "msg_id", MessageID(messageID), "organizer_id", organizerID.String(),
		"deliveries", n, "requested_by", p.requester())
	return n, nil
}
