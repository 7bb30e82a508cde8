package purchase

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/platform/outbox"
	"boxoffice/sqlcgen"
)

// The organizer's own claims on seats (issue 30 item 2): seats held back
// (blocked) and orders issued without a buyer's hold (comps and box office
// sales). Both go through the seat ownership rules of a buyer's hold: they
// lock the seats in id order first, as hold_reserve does, reclaim seats of
// expired holds, and decide under those locks. A block is a seat_blocks row
// that hold_reserve counts as taken; an issued order owns its seats through
// a confirmed hold, with the same hold_seats rows and unique indexes as a
// buyer's. So a block or a comp and a buyer's hold racing for one seat
// take turns on its lock, and exactly one gets it.

// BlockReason says why the organizer holds a seat back.
type BlockReason string

// The reasons a seat can be blocked for.
const (
	BlockKill       BlockReason = "kill"       // a production kill: sightline, mixing desk, camera
	BlockProduction BlockReason = "production" // kept for the production's own use
	BlockPress      BlockReason = "press"
	BlockSponsor    BlockReason = "sponsor"
	BlockHouse      BlockReason = "house" // the venue's house seats
	BlockOther      BlockReason = "other"
)

// BlockReasons lists every BlockReason.
var BlockReasons = []BlockReason{BlockKill, BlockProduction, BlockPress, BlockSponsor, BlockHouse, BlockOther}

// Channel is how an order came to be.
type Channel string

// The channels of an order.
const (
	// ChannelOnline is a buyer's order: a hold, paid through the provider.
	ChannelOnline Channel = "online"
	// ChannelComp is a free ticket the organizer issued.
	ChannelComp Channel = "comp"
	// ChannelBoxOffice is a sale the organizer made and was paid for
	// outside the payment provider, recorded with its reference.
	ChannelBoxOffice Channel = "box_office"
)

// ErrBoxOfficeReference is returned by IssueOrder for a box office sale
// without the reference of its payment.
var ErrBoxOfficeReference = fault.New(fault.CodeInvalid, "a box office sale needs the reference of its payment")

// BlockSeatsParams is the organizer's request to hold seats back.
type BlockSeatsParams struct {
	OrganizerID, UserID, EventID uuid.UUID
	SeatIDs                      []uuid.UUID // 1–1,000 distinct ids; validated at the HTTP edge
	Reason                       BlockReason
	Note                         string // optional
}

// BlockSeats blocks every given seat of the event organizerID organizes,
// or none: a blocked seat cannot be held by a buyer (hold_reserve counts
// it as taken) and is not available in the seat map, the sales or the
// waiting room's count. A seat blocked already keeps its block, with the
// new reason. In one transaction it locks the seats in id order, reclaims
// seats of expired holds, and refuses seats that an unreleased hold or a
// live ticket owns (*SeatUnavailableError naming them), so a block never
// coexists with a buyer's hold. Other errors: ErrEventNotFound (also for
// another organizer's event), ErrSeatsNotInEvent.
func (s *Service) BlockSeats(ctx context.Context, p BlockSeatsParams) error {
	if len(p.SeatIDs) == 0 {
		return ErrSeatsNotInEvent
	}
	seatIDs := sortedSeats(p.SeatIDs)
	var note *string
	if p.Note != "" {
		note = &p.Note
	}
	_, err := db.Retry(ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, db.WithTx(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := OrganizedEvent(ctx, tx, p.OrganizerID, p.EventID); err != nil {
				return err
			}
			if _, err := claimSeats(ctx, tx, p.EventID, seatIDs); err != nil {
				return err
			}
			if err := sqlcgen.New().SeatBlockUpsert(ctx, tx, sqlcgen.SeatBlockUpsertParams{
				EventID: p.EventID, Reason: string(p.Reason), Note: note, BlockedBy: p.UserID, SeatIds: seatIDs,
			}); err != nil {
				return fmt.Errorf("block seats: %w", err)
			}
			return nil
		})
	})
	return err
}

// ReleaseSeats releases the blocks of the given seats of the event
// organizerID organizes and returns the seats that were blocked (a seat
// that was not is ignored): they are on sale again from the commit, which
// also writes SeatsReleased (the waitlist's cue to offer them). Seats
// reserved for a waitlist offer are not the organizer's to release and
// are ignored too.
// Returns ErrEventNotFound for another organizer's event.
func (s *Service) ReleaseSeats(ctx context.Context, organizerID, eventID uuid.UUID, seatIDs []uuid.UUID) ([]uuid.UUID, error) {
	return db.WithTxV(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) ([]uuid.UUID, error) {
		if _, err := OrganizedEvent(ctx, tx, organizerID, eventID); err != nil {
			return nil, err
		}
		released, err := sqlcgen.New().SeatBlockDelete(ctx, tx, sqlcgen.SeatBlockDeleteParams{EventID: eventID, SeatIds: seatIDs})
		if err != nil {
			return nil, fmt.Errorf("release seats: %w", err)
		}
		released = sortedSeats(released)
		if len(released) > 0 {
			// Seats came back on sale: the waitlist offers them.
			env, raw, err := outbox.NewEvent(outbox.AggregateEvent, outbox.TypeSeatsReleased, eventID, time.Now(),
				uuid.Must(uuid.NewV7()).String(), "", outbox.SeatsReleased{EventID: eventID, SeatIDs: released})
			if err != nil {
				return nil, err
			}
			if err := outbox.Insert(ctx, tx, env, raw); err != nil {
				return nil, err
			}
		}
		return released, nil
	})
}

// SeatBlock is one seat the organizer holds back.
type SeatBlock struct {
	SeatID         uuid.UUID
	Section, Label string
	Reason         BlockReason
	Note           string
	BlockedAt      time.Time
}

// SeatBlocks returns the blocked seats of the event organizerID organizes,
// in seat map order, or ErrEventNotFound.
func (s *Service) SeatBlocks(ctx context.Context, organizerID, eventID uuid.UUID) ([]SeatBlock, error) {
	if _, err := OrganizedEvent(ctx, s.pool, organizerID, eventID); err != nil {
		return nil, err
	}
	rows, err := sqlcgen.New().SeatBlockListByEvent(ctx, s.read(), eventID)
	if err != nil {
		return nil, fmt.Errorf("list seat blocks: %w", err)
	}
	out := make([]SeatBlock, len(rows))
	for i, r := range rows {
		out[i] = SeatBlock{SeatID: r.SeatID, Section: r.Section, Label: r.Label, Reason: BlockReason(r.Reason), BlockedAt: r.CreatedAt}
		if r.Note != nil {
			out[i].Note = *r.Note
		}
	}
	return out, nil
}

// IssueOrderParams is the organizer's request to issue tickets directly.
type IssueOrderParams struct {
	OrganizerID, EventID uuid.UUID
	// RecipientID is the user the order belongs to: it is in their orders
	// and their tickets are theirs.
	RecipientID uuid.UUID
	SeatIDs     []uuid.UUID // 1–100 distinct ids; validated at the HTTP edge
	// Channel is ChannelComp (free: AmountMinor is ignored) or
	// ChannelBoxOffice (AmountMinor was paid outside the provider and
	// Reference says where).
	Channel     Channel
	AmountMinor int64
	Reference   string
	// CorrelationID is carried by the order's events.
	CorrelationID string
}

// IssuedOrder is an order IssueOrder created.
type IssuedOrder struct {
	OrderID, HoldID uuid.UUID
	AmountMinor     int64
	Currency        string
}

// IssueOrder issues the organizer's order for the given seats — blocked
// ones (their block ends) or available ones — all or none. In one
// transaction it locks the seats in id order, reclaims seats of expired
// holds, refuses seats an unreleased hold or a live ticket owns
// (*SeatUnavailableError), releases their blocks, and writes the order
// (paid, with its channel and reference), a confirmed hold owning the
// seats, and the usual OrderConfirmed and TicketIssueRequested: the
// tickets worker issues the tickets, and organizer webhooks and the order
// stream see the order as a buyer's. Other errors: ErrEventNotFound (also
// for another organizer's event), ErrSeatsNotInEvent,
// ErrBoxOfficeReference.
func (s *Service) IssueOrder(ctx context.Context, p IssueOrderParams) (IssuedOrder, error) {
	return db.Retry(ctx, func(ctx context.Context) (IssuedOrder, error) {
		return s.issueOrder(ctx, s.pool, p)
	})
}

// IssueOrderTx is IssueOrder in the caller's transaction tx (as a
// savepoint of it): the order exists once tx commits. Lock races are the
// caller's to retry.
func (s *Service) IssueOrderTx(ctx context.Context, tx pgx.Tx, p IssueOrderParams) (IssuedOrder, error) {
	return s.issueOrder(ctx, tx, p)
}

func (s *Service) issueOrder(ctx context.Context, on db.Executor, p IssueOrderParams) (IssuedOrder, error) {
	if len(p.SeatIDs) == 0 {
		return IssuedOrder{}, ErrSeatsNotInEvent
	}
	if p.Channel == ChannelBoxOffice && p.Reference == "" {
		return IssuedOrder{}, ErrBoxOfficeReference
	}
	if p.Channel == ChannelComp {
		p.AmountMinor = 0
	}
	seatIDs := sortedSeats(p.SeatIDs)
	var ref *string
	if p.Reference != "" {
		ref = &p.Reference
	}
	return db.WithTxV(ctx, on, func(ctx context.Context, tx pgx.Tx) (IssuedOrder, error) {
		ev, err := OrganizedEvent(ctx, tx, p.OrganizerID, p.EventID)
		if err != nil {
			return IssuedOrder{}, err
		}
		if _, err := claimSeats(ctx, tx, p.EventID, seatIDs); err != nil {
			return IssuedOrder{}, err
		}
		q := sqlcgen.New()
		if _, err := q.SeatBlockDelete(ctx, tx, sqlcgen.SeatBlockDeleteParams{EventID: p.EventID, SeatIds: seatIDs}); err != nil {
			return IssuedOrder{}, fmt.Errorf("release blocks of issued seats: %w", err)
		}
		o := IssuedOrder{OrderID: uuid.Must(uuid.NewV7()), HoldID: uuid.Must(uuid.NewV7()), AmountMinor: p.AmountMinor, Currency: ev.Currency}
		if err := q.OrderInsertIssued(ctx, tx, sqlcgen.OrderInsertIssuedParams{
			ID: o.OrderID, UserID: p.RecipientID, EventID: p.EventID, AmountMinor: o.AmountMinor, Currency: o.Currency,
			CorrelationID: p.CorrelationID, Channel: string(p.Channel), ExternalReference: ref,
		}); err != nil {
			return IssuedOrder{}, fmt.Errorf("insert issued order: %w", err)
		}
		if err := q.HoldInsertConfirmed(ctx, tx, sqlcgen.HoldInsertConfirmedParams{ID: o.HoldID, OrderID: o.OrderID}); err != nil {
			return IssuedOrder{}, fmt.Errorf("insert issued order's hold: %w", err)
		}
		if err := q.HoldSeatInsertMany(ctx, tx, sqlcgen.HoldSeatInsertManyParams{HoldID: o.HoldID, SeatIds: seatIDs}); err != nil {
			if db.ConstraintName(err) == "hold_seat_active_uq" {
				// Unreachable under the seat locks; the index is the
				// last guard, as for a buyer's hold.
				return IssuedOrder{}, &SeatUnavailableError{SeatIDs: seatIDs}
			}
			return IssuedOrder{}, fmt.Errorf("insert issued order's seats: %w", err)
		}
		now := time.Now()
		confirmed, err := emit(ctx, tx, outbox.TypeOrderConfirmed, o.OrderID, now, p.CorrelationID, "", "",
			outbox.OrderConfirmed{OrderID: o.OrderID, HoldID: o.HoldID})
		if err != nil {
			return IssuedOrder{}, err
		}
		if _, err := emit(ctx, tx, outbox.TypeTicketIssueRequested, o.OrderID, now, p.CorrelationID, confirmed.EventID.String(), "",
			outbox.TicketIssueRequested{OrderID: o.OrderID, HoldID: o.HoldID, SeatIDs: seatIDs}); err != nil {
			return IssuedOrder{}, err
		}
		return o, nil
	})
}

// claimSeats locks the event's seatIDs (sorted) in id order, reclaims
// seats of expired holds, and returns the seats' prices, or
// ErrSeatsNotInEvent, or *SeatUnavailableError naming the seats an
// unreleased hold or a live ticket owns — hold_reserve's rules, in the
// caller's transaction. A blocked seat is not refused: it is already the
// organizer's, to block again or to issue.
func claimSeats(ctx context.Context, tx pgx.Tx, eventID uuid.UUID, seatIDs []uuid.UUID) ([]sqlcgen.SeatLockForClaimRow, error) {
	q := sqlcgen.New()
	locked, err := q.SeatLockForClaim(ctx, tx, sqlcgen.SeatLockForClaimParams{EventID: eventID, SeatIds: seatIDs})
	if err != nil {
		return nil, fmt.Errorf("lock seats: %w", err)
	}
	if len(locked) != len(seatIDs) {
		return nil, ErrSeatsNotInEvent
	}
	if err := q.HoldSeatReclaimExpired(ctx, tx, seatIDs); err != nil {
		return nil, fmt.Errorf("reclaim expired seats: %w", err)
	}
	taken, err := q.SeatOwnedList(ctx, tx, seatIDs)
	if err != nil {
		return nil, fmt.Errorf("check seats: %w", err)
	}
	if len(taken) > 0 {
		return nil, &SeatUnavailableError{SeatIDs: taken}
	}
	return locked, nil
}

// sortedSeats is a sorted copy of ids, the order seat locks are taken in.
func sortedSeats(ids []uuid.UUID) []uuid.UUID {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return out
}
