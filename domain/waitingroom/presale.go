package waitingroom

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/sqlcgen"
)

// Errors of the onsale's phases and presale codes.
var (
	// ErrPresaleCode: the phase in force is a presale and the buyer gave
	// no code, or one that is not the phase's or has no use left. Nothing
	// was used.
	ErrPresaleCode = fault.New(fault.CodeForbidden, "a valid presale code is required")
	// ErrPhaseInUse: a phase the change would remove has codes or
	// redemptions. Nothing was changed.
	ErrPhaseInUse = fault.New(fault.CodeConflict, "onsale phase has presale codes")
	// ErrNoSuchPhase: no phase of the event has this name.
	ErrNoSuchPhase = fault.New(fault.CodeInvalid, "no such onsale phase")
	// ErrNotPresale: codes are only for a presale phase.
	ErrNotPresale = fault.New(fault.CodeInvalid, "the phase is not a presale")
)

// PhaseSpec is one phase of an onsale, as its organizer sets it.
type PhaseSpec struct {
	// Name identifies the phase within its event ("presale", "general").
	Name string
	// OpensAt is when the phase comes into force; it lasts until the next
	// phase opens.
	OpensAt time.Time
	// Presale phases admit only buyers with one of their codes.
	Presale bool
	// CategoryIDs are the price categories the phase sells; empty: all.
	CategoryIDs []uuid.UUID
}

// PhaseInfo is a stored phase of an onsale.
type PhaseInfo struct {
	ID uuid.UUID
	PhaseSpec
}

// CodeSpec asks for presale codes of one phase.
type CodeSpec struct {
	// Phase names the presale phase.
	Phase string
	// Codes are the organizer's own codes; when empty, Count random codes
	// are made.
	Codes []string
	Count int
	// MaxUses is how many buyers each code admits.
	MaxUses int
	// MaxSeats is how many seats all the buyers of one code may together
	// hold or own in the event.
	MaxSeats int
}

// Code is a presale code as created: the only time its text is known.
type Code struct {
	ID   uuid.UUID
	Code string
}

// NormalizeCode is the form of a code that is hashed: trimmed, upper case.
func NormalizeCode(code string) string { return strings.ToUpper(strings.TrimSpace(code)) }

// codeHash is what is stored of a code (like an API key, never the code).
func codeHash(code string) []byte {
	sum := sha256.Sum256([]byte("presale\x00" + NormalizeCode(code)))
	return sum[:]
}

// codeAlphabet is Crockford's base32: no I, L, O or U to misread.
const codeAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// newCode is 12 random characters of codeAlphabet: 60 bits, so guessing a
// code by joining is hopeless within any rate limit.
func newCode() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	for i := range b {
		b[i] = codeAlphabet[int(b[i])%len(codeAlphabet)]
	}
	return string(b)
}

func phaseFromRow(r sqlcgen.OnsalePhase) PhaseInfo {
	return PhaseInfo{ID: r.ID, PhaseSpec: PhaseSpec{Name: r.Name, OpensAt: r.OpensAt.UTC(), Presale: r.Presale, CategoryIDs: r.CategoryIds}}
}

// InForce is the phase of phases (in opening order) in force at now: the
// latest opened, or before any has opened the first (the one the
// pre-queue waits for); false without phases. hold_reserve decides the
// same way in SQL.
func InForce(phases []PhaseInfo, now time.Time) (PhaseInfo, bool) {
	if len(phases) == 0 {
		return PhaseInfo{}, false
	}
	cur := phases[0]
	for _, p := range phases[1:] {
		if !p.OpensAt.After(now) {
			cur = p
		}
	}
	return cur, true
}

// Phases returns the event's phases in opening order.
func (o *Onsales) Phases(ctx context.Context, eventID uuid.UUID) ([]PhaseInfo, error) {
	rows, err := sqlcgen.New().OnsalePhaseList(ctx, db.Interpreting(o.pool), eventID)
	if err != nil {
		return nil, fmt.Errorf("list onsale phases: %w", err)
	}
	out := make([]PhaseInfo, 0, len(rows))
	for _, r := range rows {
		out = append(out, phaseFromRow(r))
	}
	return out, nil
}

// SetPhases replaces the event's phases with specs in one transaction: a
// phase keeps its id (and its codes) when a spec has its name; a phase not
// named is removed, unless it has codes (ErrPhaseInUse, nothing changed).
// Names and opening times must be distinct (checked by the caller).
func (o *Onsales) SetPhases(ctx context.Context, eventID uuid.UUID, specs []PhaseSpec) ([]PhaseInfo, error) {
	return db.WithTxV(ctx, o.pool, func(ctx context.Context, tx pgx.Tx) ([]PhaseInfo, error) {
		q := sqlcgen.New()
		if err := q.OnsalePhaseLockEvent(ctx, tx, eventID.String()); err != nil {
			return nil, fmt.Errorf("lock onsale phases: %w", err)
		}
		names := make([]string, 0, len(specs))
		for _, s := range specs {
			names = append(names, s.Name)
		}
		if _, err := q.OnsalePhaseDeleteOthers(ctx, tx, sqlcgen.OnsalePhaseDeleteOthersParams{EventID: eventID, Names: names}); err != nil {
			return nil, fmt.Errorf("delete onsale phases: %w", err)
		}
		left, err := q.OnsalePhaseCountOthers(ctx, tx, sqlcgen.OnsalePhaseCountOthersParams{EventID: eventID, Names: names})
		if err != nil {
			return nil, fmt.Errorf("count onsale phases: %w", err)
		}
		if left > 0 {
			return nil, ErrPhaseInUse
		}
		if err := q.OnsalePhaseMoveOpening(ctx, tx, eventID); err != nil {
			return nil, fmt.Errorf("park onsale phase openings: %w", err)
		}
		sorted := slices.Clone(specs)
		slices.SortFunc(sorted, func(a, b PhaseSpec) int { return a.OpensAt.Compare(b.OpensAt) })
		out := make([]PhaseInfo, 0, len(sorted))
		for _, s := range sorted {
			cats := s.CategoryIDs
			if cats == nil {
				cats = []uuid.UUID{}
			}
			row, err := q.OnsalePhaseUpsert(ctx, tx, sqlcgen.OnsalePhaseUpsertParams{
				ID: uuid.Must(uuid.NewV7()), EventID: eventID, Name: s.Name, OpensAt: s.OpensAt.UTC(), Presale: s.Presale, CategoryIds: cats,
			})
			if err != nil {
				return nil, fmt.Errorf("write onsale phase: %w", err)
			}
			out = append(out, phaseFromRow(row))
		}
		return out, nil
	})
}

// CreateCodes creates presale codes of a presale phase of the event, in
// one transaction, and returns them: the only time their text is known
// (only a hash is stored). A code given twice, or one the phase already
// has, is ErrConflict (db), and nothing is created.
func (o *Onsales) CreateCodes(ctx context.Context, eventID uuid.UUID, spec CodeSpec) ([]Code, error) {
	return db.WithTxV(ctx, o.pool, func(ctx context.Context, tx pgx.Tx) ([]Code, error) {
		return o.CreateCodesTx(ctx, tx, eventID, spec)
	})
}

// CreateCodesTx is CreateCodes in the caller's transaction tx (an
// Idempotency-Key's, idempotency.Do), which must be on this store's
// database: the codes exist if and only if tx commits.
func (o *Onsales) CreateCodesTx(ctx context.Context, tx pgx.Tx, eventID uuid.UUID, spec CodeSpec) ([]Code, error) {
	codes := spec.Codes
	if len(codes) == 0 {
		for range spec.Count {
			codes = append(codes, newCode())
		}
	}
	q := sqlcgen.New()
	if err := q.OnsalePhaseLockEvent(ctx, tx, eventID.String()); err != nil {
		return nil, fmt.Errorf("lock onsale phases: %w", err)
	}
	rows, err := q.OnsalePhaseList(ctx, tx, eventID)
	if err != nil {
		return nil, fmt.Errorf("list onsale phases: %w", err)
	}
	i := slices.IndexFunc(rows, func(r sqlcgen.OnsalePhase) bool { return r.Name == spec.Phase })
	switch {
	case i < 0:
		return nil, ErrNoSuchPhase
	case !rows[i].Presale:
		return nil, ErrNotPresale
	}
	out := make([]Code, 0, len(codes))
	for _, c := range codes {
		id := uuid.Must(uuid.NewV7())
		err := q.PresaleCodeInsert(ctx, tx, sqlcgen.PresaleCodeInsertParams{
			ID: id, EventID: eventID, PhaseID: rows[i].ID, CodeHash: codeHash(c), MaxUses: int32(spec.MaxUses), MaxSeats: int32(spec.MaxSeats),
		})
		if err != nil {
			return nil, fmt.Errorf("insert presale code: %w", err)
		}
		out = append(out, Code{ID: id, Code: NormalizeCode(c)})
	}
	return out, nil
}

// Redeem admits userID to phaseID, a presale phase of the event (the one
// in force, InForce). A buyer who redeemed a code for the phase before is
// admitted again without using anything (whatever code they send now);
// otherwise code must be one of the phase's with a use left, and one use
// is taken and recorded for the buyer in one transaction: a conditional
// UPDATE under the code's row lock, so buyers racing for a code's last use
// take turns and exactly one gets it; the same buyer racing themselves
// uses it once (the redemption's key). A missing, unknown or used-up code
// is ErrPresaleCode.
func (o *Onsales) Redeem(ctx context.Context, eventID, phaseID, userID uuid.UUID, code string) error {
	q := sqlcgen.New()
	_, err := q.PresaleRedemptionGet(ctx, db.Interpreting(o.pool), sqlcgen.PresaleRedemptionGetParams{PhaseID: phaseID, UserID: userID})
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, db.ErrNotFound):
		return fmt.Errorf("read presale redemption: %w", err)
	case NormalizeCode(code) == "":
		return ErrPresaleCode
	}
	err = db.WithTx(ctx, o.pool, func(ctx context.Context, tx pgx.Tx) error {
		codeID, err := q.PresaleCodeUse(ctx, db.Interpreting(tx), sqlcgen.PresaleCodeUseParams{PhaseID: phaseID, CodeHash: codeHash(code)})
		if errors.Is(err, db.ErrNotFound) {
			return ErrPresaleCode
		} else if err != nil {
			return fmt.Errorf("use presale code: %w", err)
		}
		n, err := q.PresaleRedemptionInsert(ctx, tx, sqlcgen.PresaleRedemptionInsertParams{PhaseID: phaseID, UserID: userID, CodeID: codeID, EventID: eventID})
		if err != nil {
			return fmt.Errorf("record presale redemption: %w", err)
		}
		if n == 0 {
			// The same buyer redeemed concurrently and committed first:
			// give this use back by rolling back.
			return errRedeemedTwice
		}
		return nil
	})
	if errors.Is(err, errRedeemedTwice) {
		return nil
	}
	return err
}

var errRedeemedTwice = errors.New("redeemed concurrently by the same buyer")
