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

	"boxoffice/domain/catalog"
	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/platform/telemetry"
	"boxoffice/sqlcgen"
)

// Errors returned by Service.Hold. Each maps to one client-facing problem.
var (
	// ErrIdempotencyConflict: the Idempotency-Key was already used by this
	// user for a different request.
	ErrIdempotencyConflict = fault.New(fault.CodeConflict, "idempotency key reused with a different request")
	// ErrEventNotFound: the event does not exist. It is
	// catalog.ErrNotFound, the one "event not found" of every package.
	ErrEventNotFound = catalog.ErrNotFound
	// ErrSeatsNotInEvent: one or more seat ids are not seats of the event.
	ErrSeatsNotInEvent = fault.New(fault.CodeInvalid, "seats not in event")
	// ErrSeatLimit: the hold would give the buyer more seats of the event
	// than HoldParams.SeatLimit allows. Nothing was written.
	ErrSeatLimit = fault.New(fault.CodeConflict, "buyer's seat limit for the event exceeded")
	// ErrPresaleCodeRequired: the onsale phase in force is a presale and
	// the buyer has redeemed none of its codes. Nothing was written.
	ErrPresaleCodeRequired = fault.New(fault.CodeForbidden, "presale code required")
	// ErrPhaseCategory: a seat is of a price category the onsale phase in
	// force does not sell. Nothing was written.
	ErrPhaseCategory = fault.New(fault.CodeConflict, "seat's category not on sale in this phase")
	// ErrPresaleSeatLimit: the hold would give the buyers of the buyer's
	// presale code more seats than the code allows. Nothing was written.
	ErrPresaleSeatLimit = fault.New(fault.CodeConflict, "presale code's seat limit exceeded")
	// ErrCategoryNotInEvent: a best-available hold names a price category
	// the event does not have. Nothing was written.
	ErrCategoryNotInEvent = fault.New(fault.CodeInvalid, "category not in event")
	// ErrNotEnoughSeats: a best-available hold found fewer free seats of
	// the category than it asked for (or, adjacent only, no free run of
	// them), or ReserveOfferSeats fewer than a waitlist offer needs.
	// Nothing was written.
	ErrNotEnoughSeats = fault.New(fault.CodeConflict, "not enough seats available in category")
)

// SeatUnavailableError is returned when some requested seats are held by
// another live hold or already sold. SeatIDs names them.
type SeatUnavailableError struct {
	SeatIDs []uuid.UUID
}

// Code is fault.CodeConflict: the seats are someone else's now.
func (e *SeatUnavailableError) Code() fault.Code { return fault.CodeConflict }

func (e *SeatUnavailableError) Error() string {
	return fmt.Sprintf("%d seat(s) unavailable", len(e.SeatIDs))
}

// sqlStateKeyTaken is raised by hold_reserve when a concurrent request with
// the same user and idempotency key committed first.
const sqlStateKeyTaken = "BX001"

// DefaultHoldTTL is how long a hold owns its seats when Config leaves
// HoldTTL zero (and the default of BOXOFFICE_HOLD_TTL).
const DefaultHoldTTL = 5 * time.Minute

// Config configures NewService.
type Config struct {
	// HoldTTL is how long a hold owns its seats before it can be reclaimed.
	// Defaults to DefaultHoldTTL.
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
	cfg.HoldTTL = cmp.Or(cfg.HoldTTL, DefaultHoldTTL)
	cfg.KeyTTL = cmp.Or(cfg.KeyTTL, 24*time.Hour)
	return &Service{pool: pool, cfg: cfg, logger: logger.With("component", "purchase")}
}

// read is the pool for sqlcgen's reads, its errors interpreted
// (db.Interpreting): a missing row is db.ErrNotFound.
func (s *Service) read() db.DBTX { return db.Interpreting(s.pool) }

// HoldParams is a buyer's request to hold seats.
type HoldParams struct {
	UserID         uuid.UUID
	EventID        uuid.UUID
	SeatIDs        []uuid.UUID // 1–8 distinct ids; validated at the HTTP edge
	IdempotencyKey string
	CorrelationID  string
	// HoldTTL, when not 0, is the hold's lifetime instead of the
	// service's Config.HoldTTL (the event's onsale setting, by Checkout).
	HoldTTL time.Duration
	// SeatLimit is how many seats of the event one buyer may hold or own
	// at once (the organizer's onsale setting); 0 for no limit. It is
	// checked inside the hold transaction, under a lock of the (event,
	// buyer) pair, so concurrent holds of one buyer cannot together pass
	// it. A retried request is answered from its key before the check.
	SeatLimit int
	// BestAvailable, when set, asks the hold to pick the seats itself
	// instead of holding SeatIDs (which must then be empty).
	BestAvailable *BestAvailable
}

// BestAvailable asks for seats by category rather than by name: the hold
// picks the best free run of Quantity adjacent seats of the category
// (same section and row, consecutive numbers), best by the seats' scores
// the organizer set (catalog.Catalog.SetSeatScores), then by seat map
// order; with no such run free, the Quantity best free seats wherever they
// are, unless AdjacentOnly. See hold_best_available in
// migrations/functions/ for how concurrent buyers are kept apart.
type BestAvailable struct {
	CategoryID uuid.UUID
	// Quantity is 1 to 8 seats; validated at the HTTP edge.
	Quantity int
	// AdjacentOnly refuses scattered seats: ErrNotEnoughSeats instead.
	AdjacentOnly bool
}

// HeldSeat is a seat a best-available hold picked.
type HeldSeat struct {
	ID      uuid.UUID `json:"id"`
	Section string    `json:"section"`
	Label   string    `json:"label"`
}

// Hold is the result of a successful hold: a pending order owning its seats
// until ExpiresAt. Its JSON form is what the idempotency key stores.
type Hold struct {
	OrderID   uuid.UUID `json:"order_id"`
	HoldID    uuid.UUID `json:"hold_id"`
	Status    string    `json:"status"`
	ExpiresAt time.Time `json:"expires_at"`
	// Replayed is true when the answer is the stored one of an earlier
	// request with the same user and Idempotency-Key.
	Replayed bool `json:"-"`
	// Seats are the seats a best-available hold picked, in seat map
	// order (a replay's too); nil for a hold of named seats.
	Seats []HeldSeat `json:"-"`
}

// Hold reserves all requested seats for the buyer, or none.
//
// In one transaction it locks the seats in id order, releases seats of
// expired unconfirmed holds, checks that no live hold or ticket owns them,
// and writes the order, the hold, its seats, the idempotency key with the
// response and two outbox rows together: HoldCreated and, caused by it,
// PaymentAuthorizationRequested, which asks the payments consumer for the
// order's PaymentIntent (no saga step stands between the two: the order
// awaits payment with its hold active in the transaction that creates
// them).
//
// A request repeating an earlier one — same user, same Idempotency-Key, same
// event and seats — returns that request's hold (Replayed), even while both
// run concurrently; the same key with a different request returns
// ErrIdempotencyConflict. A key is bound only by a request that succeeded.
// Other errors: *SeatUnavailableError, ErrEventNotFound, ErrSeatsNotInEvent,
// ErrSeatLimit, and for the onsale phase in force (its categories, its
// presale code and the code's seat limit, checked in the same
// transaction) ErrPresaleCodeRequired, ErrPhaseCategory and
// ErrPresaleSeatLimit.
//
// With p.BestAvailable the same transaction first picks the seats (see
// BestAvailable) and the hold gets them with the same guarantees; its
// Seats say which. A retry with the same key answers the same seats. It
// also returns ErrCategoryNotInEvent and ErrNotEnoughSeats.
//
// Lock races (deadlock, serialization) are retried, never returned.
func (s *Service) Hold(ctx context.Context, p HoldParams) (Hold, error) {
	if (len(p.SeatIDs) == 0) == (p.BestAvailable == nil) {
		return Hold{}, ErrSeatsNotInEvent
	}
	seatIDs := slices.Clone(p.SeatIDs)
	slices.SortFunc(seatIDs, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	hash := p.hash(seatIDs)

	for attempt := 1; ; attempt++ {
		h, err := s.reserve(ctx, p, seatIDs, hash)
		switch {
		case err == nil:
			return h, nil
		case db.SQLState(err) == sqlStateKeyTaken:
			// A concurrent twin claimed the key between our check and our
			// insert, and committed: its answer wins.
			prior, found, perr := s.replay(ctx, p, hash)
			if perr != nil || found {
				return prior, perr
			}
			if attempt == 5 {
				return Hold{}, fmt.Errorf("reserve seats: idempotency key kept changing hands")
			}
		case errors.Is(err, ErrSeatsNotInEvent), errors.Is(err, ErrCategoryNotInEvent):
			if _, gerr := sqlcgen.New().EventGetByID(ctx, s.read(), p.EventID); errors.Is(gerr, db.ErrNotFound) {
				return Hold{}, ErrEventNotFound
			}
			return Hold{}, err
		default:
			return Hold{}, err
		}
	}
}

// reservation is a row of HoldReserve or HoldBestAvailable: the
// outcome of one hold transaction.
type reservation struct {
	Outcome        string
	Taken          []uuid.UUID
	ExpiresAt      time.Time
	AmountMinor    int64
	Currency       string
	KeyRequestHash []byte
	KeyResponse    []byte
	Seats          []byte // best available: the hold's seats as JSON
}

// reserve runs the hold transaction — one statement, one round trip.
func (s *Service) reserve(ctx context.Context, p HoldParams, seatIDs []uuid.UUID, hash []byte) (Hold, error) {
	return s.reserveOn(ctx, s.pool, p, seatIDs, hash)
}

// reserveOn runs hold_reserve on on: the pool (its own transaction,
// retried on lock races) or the caller's transaction (HoldTx).
func (s *Service) reserveOn(ctx context.Context, on sqlcgen.DBTX, p HoldParams, seatIDs []uuid.UUID, hash []byte) (Hold, error) {
	h := Hold{OrderID: uuid.Must(uuid.NewV7()), HoldID: uuid.Must(uuid.NewV7()), Status: string(OrderPendingPayment)}
	run := db.Retry[reservation]
	if _, inTx := on.(pgx.Tx); inTx {
		// A lock race aborts the caller's transaction: its to retry.
		run = func(ctx context.Context, fn func(ctx context.Context) (reservation, error)) (reservation, error) {
			return fn(ctx)
		}
	}
	row, err := run(ctx, func(ctx context.Context) (reservation, error) {
		// Both kinds of hold run hold_reserve with these arguments; a
		// best-available hold picks the seats first (hold_best_available).
		args := sqlcgen.HoldReserveParams{
			EventID:         p.EventID,
			SeatIds:         seatIDs,
			UserID:          p.UserID,
			OrderID:         h.OrderID,
			HoldID:          h.HoldID,
			HoldTtl:         cmp.Or(p.HoldTTL, s.cfg.HoldTTL),
			IdempotencyKey:  p.IdempotencyKey,
			RequestHash:     hash,
			KeyTtl:          s.cfg.KeyTTL,
			CorrelationID:   p.CorrelationID,
			OutboxID:        uuid.Must(uuid.NewV7()),
			SeatLimit:       int32(max(p.SeatLimit, 0)),
			AuthorizationID: uuid.Must(uuid.NewV7()),
			TraceParent:     telemetry.StoredParent(ctx),
		}
		if ba := p.BestAvailable; ba != nil {
			r, err := sqlcgen.New().HoldBestAvailable(ctx, on, sqlcgen.HoldBestAvailableParams{
				EventID: args.EventID, CategoryID: ba.CategoryID, Quantity: int32(ba.Quantity), AdjacentOnly: ba.AdjacentOnly,
				UserID: args.UserID, OrderID: args.OrderID, HoldID: args.HoldID, HoldTtl: args.HoldTtl,
				IdempotencyKey: args.IdempotencyKey, RequestHash: args.RequestHash, KeyTtl: args.KeyTtl,
				CorrelationID: args.CorrelationID, OutboxID: args.OutboxID, SeatLimit: args.SeatLimit,
				AuthorizationID: args.AuthorizationID, TraceParent: args.TraceParent,
			})
			return reservation(r), err
		}
		r, err := sqlcgen.New().HoldReserve(ctx, on, args)
		return reservation{Outcome: r.Outcome, Taken: r.Taken, ExpiresAt: r.ExpiresAt, AmountMinor: r.AmountMinor,
			Currency: r.Currency, KeyRequestHash: r.KeyRequestHash, KeyResponse: r.KeyResponse}, err
	})
	if err != nil {
		if db.ConstraintName(err) == "hold_seat_active_uq" {
			// Unreachable while holds lock their seats first; the index is
			// the last guard should a path one day not.
			s.logger.ErrorContext(ctx, "active hold index rejected a hold made under seat locks",
				"correlation_id", p.CorrelationID, "event_id", p.EventID)
			return Hold{}, &SeatUnavailableError{SeatIDs: seatIDs}
		}
		if db.SQLState(err) == sqlStateKeyTaken {
			return Hold{}, err
		}
		return Hold{}, fmt.Errorf("reserve seats: %w", err)
	}
	switch row.Outcome {
	case "held":
		h.ExpiresAt = row.ExpiresAt.UTC()
		return h, decodeSeats(row.Seats, &h)
	case "replay":
		prior, err := decodeStored(row.KeyRequestHash, row.KeyResponse, hash)
		if err != nil {
			return Hold{}, err
		}
		return prior, decodeSeats(row.Seats, &prior)
	case "seats_taken":
		return Hold{}, &SeatUnavailableError{SeatIDs: row.Taken}
	case "seats_not_in_event":
		return Hold{}, ErrSeatsNotInEvent
	case "seat_limit":
		return Hold{}, ErrSeatLimit
	case "presale_code_required":
		return Hold{}, ErrPresaleCodeRequired
	case "phase_category":
		return Hold{}, ErrPhaseCategory
	case "presale_seat_limit":
		return Hold{}, ErrPresaleSeatLimit
	case "category_not_in_event":
		return Hold{}, ErrCategoryNotInEvent
	case "not_enough_seats":
		return Hold{}, ErrNotEnoughSeats
	}
	return Hold{}, fmt.Errorf("reserve seats: unknown outcome %q", row.Outcome)
}

// decodeSeats sets h.Seats from a best-available hold's seats JSON; a
// named-seat hold has none and keeps nil.
func decodeSeats(seats []byte, h *Hold) error {
	if len(seats) == 0 {
		return nil
	}
	if err := json.Unmarshal(seats, &h.Seats); err != nil {
		return fmt.Errorf("decode held seats: %w", err)
	}
	return nil
}

// replay answers p from its stored idempotency key, with the hold's seats
// when p is best available. found is false when the key is not bound.
func (s *Service) replay(ctx context.Context, p HoldParams, hash []byte) (Hold, bool, error) {
	row, err := sqlcgen.New().IdempotencyKeyGet(ctx, s.read(), sqlcgen.IdempotencyKeyGetParams{UserID: p.UserID, Key: p.IdempotencyKey})
	if errors.Is(err, db.ErrNotFound) {
		return Hold{}, false, nil
	} else if err != nil {
		return Hold{}, false, fmt.Errorf("read idempotency key: %w", err)
	}
	h, err := decodeStored(row.RequestHash, row.Response, hash)
	if err != nil {
		return Hold{}, true, err
	}
	h.Status = row.OrderStatus // what became of the order, not the stored pending_payment
	if p.BestAvailable != nil {
		seats, err := sqlcgen.New().HoldSeatsOfHold(ctx, s.read(), h.HoldID)
		if err != nil {
			return Hold{}, true, fmt.Errorf("read held seats: %w", err)
		}
		for _, st := range seats {
			h.Seats = append(h.Seats, HeldSeat{ID: st.ID, Section: st.Section, Label: st.Label})
		}
	}
	return h, true, nil
}

// decodeStored returns the hold stored under an idempotency key, or
// ErrIdempotencyConflict when the key was bound by a different request.
func decodeStored(storedHash, response, hash []byte) (Hold, error) {
	if !bytes.Equal(storedHash, hash) {
		return Hold{}, ErrIdempotencyConflict
	}
	var h Hold
	if err := json.Unmarshal(response, &h); err != nil {
		return Hold{}, fmt.Errorf("decode stored hold response: %w", err)
	}
	h.ExpiresAt = h.ExpiresAt.UTC()
	h.Replayed = true
	return h, nil
}

// hash identifies what p asks for (requestHash, or for best available
// the category, quantity and adjacency asked), so that a key reused with
// another request is a conflict, whichever kind each is.
func (p HoldParams) hash(sortedSeatIDs []uuid.UUID) []byte {
	ba := p.BestAvailable
	if ba == nil {
		return requestHash(p.EventID, sortedSeatIDs)
	}
	sum := sha256.New()
	sum.Write([]byte("hold-best-available\x00"))
	sum.Write(p.EventID[:])
	sum.Write(ba.CategoryID[:])
	adjacent := byte(0)
	if ba.AdjacentOnly {
		adjacent = 1
	}
	sum.Write([]byte{byte(ba.Quantity), adjacent})
	return sum.Sum(nil)
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
