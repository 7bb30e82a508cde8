// Package purchase reserves seats: the one place where a buyer's request
// becomes temporary ownership of seats, in a single PostgreSQL transaction.
package purchase

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"boxoffice/db"
	"boxoffice/outbox"
	"boxoffice/sqlcgen"
)

// Errors returned by Service.Hold. Each maps to one client-facing problem.
var (
	// ErrIdempotencyConflict: the Idempotency-Key was already used by this
	// user for a different request.
	ErrIdempotencyConflict = errors.New("idempotency key reused with a different request")
	// ErrEventNotFound: the event does not exist.
	ErrEventNotFound = errors.New("event not found")
	// ErrSeatsNotInEvent: one or more seat ids are not seats of the event.
	ErrSeatsNotInEvent = errors.New("seats not in event")
)

// SeatUnavailableError is returned when some requested seats are held by
// another live hold or already sold. SeatIDs names them.
type SeatUnavailableError struct {
	SeatIDs []uuid.UUID
}

func (e *SeatUnavailableError) Error() string {
	return fmt.Sprintf("%d seat(s) unavailable", len(e.SeatIDs))
}

// errKeyTaken: a concurrent request with the same key committed first.
var errKeyTaken = errors.New("idempotency key claimed concurrently")

// Config configures NewService.
type Config struct {
	// HoldTTL is how long a hold owns its seats before it can be reclaimed.
	// Defaults to 5m.
	HoldTTL time.Duration
	// KeyTTL is how long an Idempotency-Key is remembered. Defaults to 24h.
	KeyTTL time.Duration
}

// Service reserves seats.
type Service struct {
	pool   *pgxpool.Pool
	cfg    Config
	logger *slog.Logger
}

// NewService returns a Service writing to pool.
func NewService(pool *pgxpool.Pool, logger *slog.Logger, cfg Config) *Service {
	cfg.HoldTTL = cmp.Or(cfg.HoldTTL, 5*time.Minute)
	cfg.KeyTTL = cmp.Or(cfg.KeyTTL, 24*time.Hour)
	return &Service{pool: pool, cfg: cfg, logger: logger.With("component", "purchase")}
}

// HoldParams is a buyer's request to hold seats.
type HoldParams struct {
	UserID         uuid.UUID
	EventID        uuid.UUID
	SeatIDs        []uuid.UUID // 1–8 distinct ids; validated at the HTTP edge
	IdempotencyKey string
	CorrelationID  string
}

// Hold is the result of a successful hold: a pending order owning its seats
// until ExpiresAt.
type Hold struct {
	OrderID   uuid.UUID `json:"order_id"`
	HoldID    uuid.UUID `json:"hold_id"`
	Status    string    `json:"status"`
	ExpiresAt time.Time `json:"expires_at"`
	// Replayed is true when the answer is the stored one of an earlier
	// request with the same user and Idempotency-Key.
	Replayed bool `json:"-"`
}

// Hold reserves all requested seats for the buyer, or none.
//
// In one transaction it locks the seats in id order, releases seats of
// expired unconfirmed holds, checks that no live hold or ticket owns them,
// and writes the order, the hold, its seats, the idempotency key with the
// response and the HoldCreated outbox row together.
//
// A request repeating an earlier one — same user, same Idempotency-Key, same
// event and seats — returns that request's hold (Replayed), even while both
// run concurrently; the same key with a different request returns
// ErrIdempotencyConflict. A key is bound only by a request that succeeded.
// Other errors: *SeatUnavailableError, ErrEventNotFound, ErrSeatsNotInEvent.
// Lock races (deadlock, serialization) are retried, never returned.
func (s *Service) Hold(ctx context.Context, p HoldParams) (Hold, error) {
	if len(p.SeatIDs) == 0 {
		return Hold{}, ErrSeatsNotInEvent
	}
	seatIDs := slices.Clone(p.SeatIDs)
	slices.SortFunc(seatIDs, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	hash := requestHash(p.EventID, seatIDs)

	h, err := db.WithTxV(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) (Hold, error) {
		return s.holdTx(ctx, tx, p, seatIDs, hash)
	})
	var unavailable *SeatUnavailableError
	switch {
	case err == nil:
		return h, nil
	case errors.As(err, &unavailable), errors.Is(err, errKeyTaken):
		// The seats may be taken by this very request's first attempt, or
		// the key by a concurrent twin: the stored answer, if any, wins.
		if prior, found, perr := s.replay(ctx, p.UserID, p.IdempotencyKey, hash); perr != nil || found {
			return prior, perr
		}
		if errors.Is(err, errKeyTaken) {
			// The twin that claimed the key rolled back after all; a plain
			// retry decides afresh.
			return s.Hold(ctx, p)
		}
		return Hold{}, err
	case errors.Is(err, ErrSeatsNotInEvent):
		if _, gerr := sqlcgen.New().EventGetByID(ctx, s.pool, p.EventID); errors.Is(db.Interpret(gerr), db.ErrNotFound) {
			return Hold{}, ErrEventNotFound
		}
		return Hold{}, err
	default:
		return Hold{}, err
	}
}

func (s *Service) holdTx(ctx context.Context, tx pgx.Tx, p HoldParams, seatIDs []uuid.UUID, hash []byte) (Hold, error) {
	q := sqlcgen.New()
	seats, err := q.SeatLockForHold(ctx, tx, sqlcgen.SeatLockForHoldParams{EventID: p.EventID, SeatIds: seatIDs})
	if err != nil {
		return Hold{}, fmt.Errorf("lock seats: %w", err)
	}
	if len(seats) != len(seatIDs) {
		return Hold{}, ErrSeatsNotInEvent
	}
	taken, err := q.HoldSeatReclaimExpired(ctx, tx, seatIDs)
	if err != nil {
		return Hold{}, fmt.Errorf("reclaim expired holds: %w", err)
	}
	if len(taken) > 0 {
		slices.SortFunc(taken, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
		return Hold{}, &SeatUnavailableError{SeatIDs: taken}
	}

	now := seats[0].DbNow
	var amount int64
	for _, seat := range seats {
		amount += seat.PriceMinor
	}
	h := Hold{
		OrderID:   uuid.Must(uuid.NewV7()),
		HoldID:    uuid.Must(uuid.NewV7()),
		Status:    "pending_payment",
		ExpiresAt: now.Add(s.cfg.HoldTTL).UTC(),
	}
	response, err := json.Marshal(h)
	if err != nil {
		return Hold{}, fmt.Errorf("marshal hold response: %w", err)
	}
	env, envBytes, err := outbox.NewOrderEvent(outbox.TypeHoldCreated, h.OrderID, now, p.CorrelationID, "", outbox.HoldCreated{
		OrderID:     h.OrderID,
		HoldID:      h.HoldID,
		EventID:     p.EventID,
		UserID:      p.UserID,
		SeatIDs:     seatIDs,
		AmountMinor: amount,
		Currency:    seats[0].Currency,
		ExpiresAt:   h.ExpiresAt,
	})
	if err != nil {
		return Hold{}, err
	}
	claimed, err := q.HoldCreate(ctx, tx, sqlcgen.HoldCreateParams{
		OrderID:         h.OrderID,
		UserID:          p.UserID,
		EventID:         p.EventID,
		AmountMinor:     amount,
		Currency:        seats[0].Currency,
		CorrelationID:   p.CorrelationID,
		HoldID:          h.HoldID,
		ExpiresAt:       h.ExpiresAt,
		SeatIds:         seatIDs,
		IdempotencyKey:  p.IdempotencyKey,
		RequestHash:     hash,
		Response:        response,
		KeyExpiresAt:    now.Add(s.cfg.KeyTTL),
		OutboxID:        env.EventID,
		OutboxSubject:   env.Subject(),
		OutboxEventType: env.EventType,
		OutboxEnvelope:  envBytes,
	})
	if err != nil {
		if errors.Is(db.Interpret(err), db.ErrConflict) && db.ConstraintName(err) == "hold_seat_active_uq" {
			// Unreachable while every hold locks its seats first; the index
			// is the last guard if one day a path does not.
			s.logger.ErrorContext(ctx, "active hold index rejected a hold made under seat locks",
				"correlation_id", p.CorrelationID, "event_id", p.EventID)
			return Hold{}, &SeatUnavailableError{SeatIDs: seatIDs}
		}
		return Hold{}, fmt.Errorf("create hold: %w", err)
	}
	if !claimed {
		return Hold{}, errKeyTaken
	}
	return h, nil
}

// replay answers from a stored idempotency key. found is false when the key
// is not bound; it returns ErrIdempotencyConflict when the key is bound to a
// different request.
func (s *Service) replay(ctx context.Context, userID uuid.UUID, key string, hash []byte) (Hold, bool, error) {
	row, err := sqlcgen.New().IdempotencyKeyGet(ctx, s.pool, sqlcgen.IdempotencyKeyGetParams{UserID: userID, Key: key})
	if err = db.Interpret(err); errors.Is(err, db.ErrNotFound) {
		return Hold{}, false, nil
	} else if err != nil {
		return Hold{}, false, fmt.Errorf("read idempotency key: %w", err)
	}
	if !bytes.Equal(row.RequestHash, hash) {
		return Hold{}, true, ErrIdempotencyConflict
	}
	var h Hold
	if err := json.Unmarshal(row.Response, &h); err != nil {
		return Hold{}, true, fmt.Errorf("decode stored hold response: %w", err)
	}
	h.Replayed = true
	return h, true, nil
}

// requestHash identifies what a hold request asks for, independent of how
// the client ordered the seat ids: the operation, the event and the sorted
// seats.
func requestHash(eventID uuid.UUID, sortedSeatIDs []uuid.UUID) []byte {
	sum := sha256.New()
	sum.Write([]byte("hold\x00"))
	sum.Write(eventID[:])
	for _, id := range sortedSeatIDs {
		sum.Write(id[:])
	}
	return sum.Sum(nil)
}
