package waitlist

import (
	"bytes"
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

	"boxoffice/domain/catalog"
	"boxoffice/domain/purchase"
	"boxoffice/domain/webhooks"
	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/platform/outbox"
	"boxoffice/sqlcgen"
)

// State is where a waitlist entry stands.
type State string

// The states of an entry: waiting, then offered, then one of the three
// ends (accepted, expired, left); a waiting entry may also leave.
const (
	StateWaiting  State = "waiting"
	StateOffered  State = "offered"
	StateAccepted State = "accepted"
	StateExpired  State = "expired"
	StateLeft     State = "left"
)

// Errors of the waitlist. Each maps to one client-facing problem.
var (
	// ErrSeatsAvailable: the category has a seat on sale, so the buyer
	// holds it instead of joining. Nothing was written.
	ErrSeatsAvailable = fault.New(fault.CodeConflict, "seats of the category are on sale")
	// ErrAlreadyWaiting: the buyer has a live (waiting or offered) entry
	// for the event already.
	ErrAlreadyWaiting = fault.New(fault.CodeConflict, "already on the event's waitlist")
	// ErrCategoryNotInEvent: the price category is not one of the event's.
	ErrCategoryNotInEvent = fault.New(fault.CodeInvalid, "price category not in event")
	// ErrEntryNotFound: no such entry, or not the caller's.
	ErrEntryNotFound = fault.New(fault.CodeNotFound, "no such waitlist entry")
	// ErrOfferNotLive: the entry has no offer to accept: it is still
	// waiting, or its offer expired (and passed to the next buyer), or it
	// left.
	ErrOfferNotLive = fault.New(fault.CodeConflict, "the entry has no live offer")
)

// DefaultOfferTTL is how long an offer reserves its seats when Config
// leaves OfferTTL zero.
const DefaultOfferTTL = 10 * time.Minute

// maxRound bounds how many waiting entries one offer round considers.
const maxRound = 500

// Config configures New.
type Config struct {
	// OfferTTL is how long an offer reserves its seats for its buyer.
	// Defaults to DefaultOfferTTL.
	OfferTTL time.Duration
	// Logger receives the waitlist's logs. Defaults to discarding logs.
	Logger *slog.Logger
}

// Service is the waitlist of sold-out events: it owns waitlist_entries,
// and asks package purchase to reserve, release and hold seats.
type Service struct {
	pool     *pgxpool.Pool
	purchase *purchase.Service
	cfg      Config
	logger   *slog.Logger
}

// New returns the waitlist over pool, holding accepted offers' seats with
// p. Panics without them (a programmer error).
func New(pool *pgxpool.Pool, p *purchase.Service, cfg Config) *Service {
	if pool == nil || p == nil {
		panic("waitlist.New: pool and purchase service are required")
	}
	cfg.OfferTTL = cmp.Or(cfg.OfferTTL, DefaultOfferTTL)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Service{pool: pool, purchase: p, cfg: cfg, logger: cfg.Logger.With("component", "waitlist")}
}

// Entry is one buyer's place on an event's waitlist.
type Entry struct {
	ID, EventID, CategoryID, UserID uuid.UUID
	Quantity                        int
	State                           State
	// Ahead is how many waiting entries of the same event and category
	// are before this one (0 unless it is waiting).
	Ahead int
	// OfferedSeats are the seats reserved for a live offer (none once it
	// ended).
	OfferedSeats []uuid.UUID
	// OfferedAt and OfferExpiresAt are the last offer's, when there was
	// one.
	OfferedAt, OfferExpiresAt *time.Time
	// OrderID is the order of the accepted offer.
	OrderID              *uuid.UUID
	CreatedAt, UpdatedAt time.Time
}

// JoinParams is a buyer's request to join an event's waitlist.
type JoinParams struct {
	UserID, EventID, CategoryID uuid.UUID
	Quantity                    int // 1–8; validated at the HTTP edge
	// CorrelationID is the request's, carried by what the round after
	// the join offers.
	CorrelationID string
}

// Join puts the buyer at the back of the event's waitlist for Quantity
// seats of the category, and returns the entry. Only when the category
// has no seat on sale (else ErrSeatsAvailable, nothing written): the
// check and the insert run under the event's waitlist lock, which every
// offer round takes too, and once the entry is in, a round of its own
// offers any seat that came back meanwhile, so an entry never waits
// beside a free seat of its category (the waitlist consumer skips, without
// the lock, events nobody waited for). Errors: catalog.ErrNotFound (no
// such event), ErrCategoryNotInEvent, ErrAlreadyWaiting.
func (s *Service) Join(ctx context.Context, p JoinParams) (Entry, error) {
	id := uuid.Must(uuid.NewV7())
	err := db.WithTx(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) error {
		q := sqlcgen.New()
		if _, err := q.EventGetByID(ctx, tx, p.EventID); errors.Is(err, db.ErrNotFound) {
			return catalog.ErrNotFound
		} else if err != nil {
			return fmt.Errorf("read event: %w", err)
		}
		if _, err := q.WaitlistCategoryOfEvent(ctx, tx, sqlcgen.WaitlistCategoryOfEventParams{
			CategoryID: p.CategoryID, EventID: p.EventID,
		}); errors.Is(err, db.ErrNotFound) {
			return ErrCategoryNotInEvent
		} else if err != nil {
			return fmt.Errorf("read category: %w", err)
		}
		if err := q.WaitlistLockEvent(ctx, tx, p.EventID); err != nil {
			return fmt.Errorf("lock event's waitlist: %w", err)
		}
		free, err := purchase.HasFreeSeat(ctx, tx, p.EventID, p.CategoryID)
		if err != nil {
			return err
		}
		if free {
			return ErrSeatsAvailable
		}
		_, err = q.WaitlistEntryInsert(ctx, tx, sqlcgen.WaitlistEntryInsertParams{
			ID: id, EventID: p.EventID, CategoryID: p.CategoryID, UserID: p.UserID, Quantity: int32(p.Quantity),
		})
		if errors.Is(err, db.ErrConflict) {
			return ErrAlreadyWaiting
		} else if err != nil {
			return fmt.Errorf("insert waitlist entry: %w", err)
		}
		return nil
	})
	if err != nil {
		return Entry{}, err
	}
	// The waitlist consumer skips, without a lock, the events nobody waits
	// for (Waiting). A join whose check ran before seats came back and
	// that committed after the consumer looked would then wait beside a
	// free seat: so once the entry is in, a round runs under the lock. It
	// offers nothing unless a seat came back in that window. Failing, it
	// is logged and the join stands: the next seat to come back runs one
	// again.
	if err := db.WithTx(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := s.OfferRound(ctx, tx, p.EventID, p.CorrelationID)
		return err
	}); err != nil {
		s.logger.WarnContext(ctx, "offer round after a join", "event_id", p.EventID, "correlation_id", p.CorrelationID, "error", err.Error())
	}
	return s.Get(ctx, p.UserID, id)
}

// Waiting returns, for each of ids (orders' or events' ids) that exists,
// whether its event has an entry waiting (an id of neither is left out):
// read without a lock, so a join committing at the same time may be
// missed, which Join makes up for.
func (s *Service) Waiting(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]bool, error) {
	rows, err := sqlcgen.New().WaitlistWaiting(ctx, db.Interpreting(s.pool), ids)
	if err != nil {
		return nil, fmt.Errorf("read who waits: %w", err)
	}
	waiting := make(map[uuid.UUID]bool, len(rows))
	for _, r := range rows {
		waiting[r.ID] = r.Waiting
	}
	return waiting, nil
}

// Get returns the buyer's entry, or ErrEntryNotFound (also for another
// buyer's).
func (s *Service) Get(ctx context.Context, userID, entryID uuid.UUID) (Entry, error) {
	r, err := sqlcgen.New().WaitlistEntryGet(ctx, db.Interpreting(s.pool), entryID)
	if errors.Is(err, db.ErrNotFound) || (err == nil && r.UserID != userID) {
		return Entry{}, ErrEntryNotFound
	} else if err != nil {
		return Entry{}, fmt.Errorf("read waitlist entry: %w", err)
	}
	e := Entry{
		ID: r.ID, EventID: r.EventID, CategoryID: r.CategoryID, UserID: r.UserID, Quantity: int(r.Quantity),
		State: State(r.State), Ahead: int(r.Ahead), OfferedSeats: r.OfferedSeats, OfferedAt: db.UTC(r.OfferedAt),
		OfferExpiresAt: db.UTC(r.OfferExpiresAt), OrderID: r.OrderID, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
	if e.OfferedSeats == nil {
		e.OfferedSeats = []uuid.UUID{}
	}
	return e, nil
}

// Leave takes the buyer's entry off the waitlist and returns it. A live
// offer ends with it: in the same transaction its seats are released and
// offered to the next entries (OfferRound). Leaving an entry that already
// ended changes nothing. Returns ErrEntryNotFound for another buyer's.
func (s *Service) Leave(ctx context.Context, userID, entryID uuid.UUID) (Entry, error) {
	err := db.WithTx(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) error {
		q := sqlcgen.New()
		e, err := s.lockOwn(ctx, tx, userID, entryID)
		if err != nil {
			return err
		}
		switch State(e.State) {
		case StateWaiting:
			return q.WaitlistEntryLeave(ctx, tx, entryID)
		case StateOffered:
			if _, err := purchase.ReleaseOfferSeats(ctx, tx, entryID); err != nil {
				return err
			}
			if err := q.WaitlistEntryLeave(ctx, tx, entryID); err != nil {
				return fmt.Errorf("leave waitlist: %w", err)
			}
			_, err := s.OfferRound(ctx, tx, e.EventID, uuid.Must(uuid.NewV7()).String())
			return err
		}
		return nil
	})
	if err != nil {
		return Entry{}, err
	}
	return s.Get(ctx, userID, entryID)
}

// lockOwn locks the buyer's entry, or returns ErrEntryNotFound.
func (s *Service) lockOwn(ctx context.Context, tx pgx.Tx, userID, entryID uuid.UUID) (sqlcgen.WaitlistEntryLockRow, error) {
	e, err := sqlcgen.New().WaitlistEntryLock(ctx, tx, entryID)
	if errors.Is(err, db.ErrNotFound) || (err == nil && e.UserID != userID) {
		return e, ErrEntryNotFound
	} else if err != nil {
		return e, fmt.Errorf("lock waitlist entry: %w", err)
	}
	return e, nil
}

// AcceptParams is a buyer's acceptance of their entry's offer.
type AcceptParams struct {
	UserID, EntryID uuid.UUID
	CorrelationID   string
	// Rules are the event's checkout rules (its per-buyer seat limit and
	// hold lifetime), as for any hold.
	Rules purchase.OnsaleRules
}

// Accept holds the offered seats for the buyer and returns the entry,
// accepted, naming the hold's order (pending payment, paid as any
// other). The offer is the buyer's admission for this hold: no waiting
// room token is needed. In one transaction it locks the entry, checks
// that the offer is the buyer's and live by the database clock, ends the
// reservation and holds the seats with hold_reserve (same rules and
// guarantees as every hold: seat locks, the buyer's limits), and marks
// the entry accepted; if anything fails, nothing changes. The expiry
// sweeper locks the same row first, so an acceptance and the offer's
// expiry racing have exactly one outcome. Accepting again returns the
// accepted entry. Errors: ErrEntryNotFound, ErrOfferNotLive,
// purchase.ErrSeatLimitUnknown, and the hold's errors
// (purchase.ErrSeatLimit…).
func (s *Service) Accept(ctx context.Context, p AcceptParams) (Entry, error) {
	locked, err := s.Get(ctx, p.UserID, p.EntryID)
	if err != nil {
		return Entry{}, err
	}
	if locked.State == StateAccepted {
		return locked, nil
	}
	rules, err := p.Rules.CheckoutRules(ctx, locked.EventID)
	if err != nil {
		return Entry{}, fmt.Errorf("%w: %w", purchase.ErrSeatLimitUnknown, err)
	}
	err = db.WithTx(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) error {
		e, err := s.lockOwn(ctx, tx, p.UserID, p.EntryID)
		if err != nil {
			return err
		}
		if State(e.State) == StateAccepted {
			return nil
		}
		if State(e.State) != StateOffered || !e.OfferLive {
			return ErrOfferNotLive
		}
		seats, err := purchase.ReleaseOfferSeats(ctx, tx, e.ID)
		if err != nil {
			return err
		}
		h, err := s.purchase.HoldTx(ctx, tx, purchase.HoldParams{
			UserID: p.UserID, EventID: e.EventID, SeatIDs: seats, IdempotencyKey: "waitlist:" + e.ID.String(),
			CorrelationID: p.CorrelationID, HoldTTL: rules.HoldTTL, SeatLimit: rules.SeatLimit,
		})
		if err != nil {
			return fmt.Errorf("hold offered seats: %w", err)
		}
		if err := sqlcgen.New().WaitlistEntryAccept(ctx, tx, sqlcgen.WaitlistEntryAcceptParams{ID: e.ID, OrderID: h.OrderID}); err != nil {
			return fmt.Errorf("accept offer: %w", err)
		}
		return nil
	})
	if err != nil {
		return Entry{}, err
	}
	s.logger.InfoContext(ctx, "waitlist offer accepted", "entry_id", p.EntryID, "correlation_id", p.CorrelationID)
	return s.Get(ctx, p.UserID, p.EntryID)
}

// OfferRound offers, in tx, the event's free seats to its waiting entries
// in waitlist order and returns how many entries it offered seats to.
// Each entry is offered its whole quantity of its category or nothing;
// an entry whose quantity is not free yet keeps its place, and a later
// entry that fits is offered meanwhile (first fit, in order). An offer
// reserves its seats (purchase.ReserveOfferSeats) until now + OfferTTL,
// and writes WaitlistOffered to the outbox and the waitlist.offered
// webhook message, in tx.
//
// It runs under the event's waitlist lock (joins and other rounds of the
// event take turns with it). It offers what is free when it runs, not
// what an event named: running it twice offers nothing the second time,
// so it is safe for every at-least-once caller.
func (s *Service) OfferRound(ctx context.Context, tx pgx.Tx, eventID uuid.UUID, correlationID string) (int, error) {
	q := sqlcgen.New()
	if err := q.WaitlistLockEvent(ctx, tx, eventID); err != nil {
		return 0, fmt.Errorf("lock event's waitlist: %w", err)
	}
	waiting, err := q.WaitlistWaitingLock(ctx, tx, sqlcgen.WaitlistWaitingLockParams{EventID: eventID, Max: maxRound})
	if err != nil {
		return 0, fmt.Errorf("read waitlist: %w", err)
	}
	if len(waiting) == 0 {
		return 0, nil
	}
	organizerID, err := q.WaitlistEventOrganizer(ctx, tx, eventID)
	if err != nil {
		return 0, fmt.Errorf("read event's organizer: %w", err)
	}
	soldOut := map[uuid.UUID]bool{}
	offered := 0
	for _, w := range waiting {
		if soldOut[w.CategoryID] {
			continue
		}
		seats, err := purchase.ReserveOfferSeats(ctx, tx, eventID, w.CategoryID, w.ID, w.UserID, int(w.Quantity))
		if errors.Is(err, purchase.ErrNotEnoughSeats) {
			free, err := purchase.HasFreeSeat(ctx, tx, eventID, w.CategoryID)
			if err != nil {
				return 0, err
			}
			soldOut[w.CategoryID] = !free
			continue
		} else if err != nil {
			return 0, err
		}
		o, err := q.WaitlistEntryOffer(ctx, tx, sqlcgen.WaitlistEntryOfferParams{ID: w.ID, Ttl: s.cfg.OfferTTL})
		if err != nil {
			return 0, fmt.Errorf("offer seats: %w", err)
		}
		offeredAt, expires := o.OfferedAt.UTC(), o.OfferExpiresAt.UTC() // set by the UPDATE
		env, raw, err := outbox.NewEvent(outbox.AggregateWaitlistEntry, outbox.TypeWaitlistOffered, w.ID, offeredAt, correlationID, "",
			outbox.WaitlistOffered{EntryID: w.ID, EventID: eventID, CategoryID: w.CategoryID, UserID: w.UserID, SeatIDs: seats, ExpiresAt: expires})
		if err != nil {
			return 0, err
		}
		if err := outbox.Insert(ctx, tx, env, raw); err != nil {
			return 0, err
		}
		if err := webhooks.StoreWaitlistOffered(ctx, tx, organizerID, correlationID, offeredAt, webhooks.WaitlistOfferedData{
			EntryID: w.ID, EventID: eventID, CategoryID: w.CategoryID, SeatIDs: seats, ExpiresAt: expires,
		}); err != nil {
			return 0, err
		}
		s.logger.InfoContext(ctx, "waitlist offer made", "entry_id", w.ID, "event_id", eventID,
			"seats", len(seats), "expires_at", expires, "correlation_id", correlationID)
		offered++
	}
	return offered, nil
}

// ExpireOffers ends, in one transaction, up to batch offers past their
// expiry by the database clock (skipping those being accepted: their row
// is locked), releases their seats and offers them to the next entries
// (OfferRound), and returns how many it ended. An acceptance that locked
// the entry first wins; one that comes after finds the entry expired.
func (s *Service) ExpireOffers(ctx context.Context, batch int) (int, error) {
	return db.WithTxV(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) (int, error) {
		ended, err := sqlcgen.New().WaitlistOfferClaimExpired(ctx, tx, int32(batch))
		if err != nil {
			return 0, fmt.Errorf("claim expired offers: %w", err)
		}
		var events []uuid.UUID
		for _, e := range ended {
			if _, err := purchase.ReleaseOfferSeats(ctx, tx, e.ID); err != nil {
				return 0, err
			}
			events = append(events, e.EventID)
		}
		// Each event's waitlist lock once, in one order for every sweeper.
		slices.SortFunc(events, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
		for _, ev := range slices.Compact(events) {
			if _, err := s.OfferRound(ctx, tx, ev, uuid.Must(uuid.NewV7()).String()); err != nil {
				return 0, err
			}
		}
		return len(ended), nil
	})
}

// EventOfOrder returns the event of an order, for a caller that learnt
// seats of the order came back (catalog.ErrNotFound when there is no such
// order).
func EventOfOrder(ctx context.Context, tx pgx.Tx, orderID uuid.UUID) (uuid.UUID, error) {
	id, err := sqlcgen.New().WaitlistEventOfOrder(ctx, tx, orderID)
	if errors.Is(err, db.ErrNotFound) {
		return uuid.Nil, catalog.ErrNotFound
	} else if err != nil {
		return uuid.Nil, fmt.Errorf("read order's event: %w", err)
	}
	return id, nil
}
