package waitingroom

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"boxoffice/platform/db"
	"boxoffice/sqlcgen"
)

// Settings are an event's onsale settings, set by its organizer. The zero
// value is a new event's: open, no cap, no seat limit.
type Settings struct {
	// OpensAt, when in the future, schedules the opening: until then
	// buyers gather in the pre-queue.
	OpensAt *time.Time
	// Paused queues buyers in arrival order and admits nobody.
	Paused bool
	// MaxRate caps admissions per second; 0: only the controller limits.
	MaxRate int
	// SeatLimit is how many seats one buyer may hold or own in the
	// event; 0: no limit.
	SeatLimit int
	// PaymentAttempts is how many times a buyer may try to pay for an
	// order (1 to 10); 0: purchase.DefaultPaymentAttempts. The saga reads
	// it from the same row.
	PaymentAttempts int
	// HoldTTL is how long a hold of the event lasts (1 to 30 minutes, in
	// whole seconds); 0: the deployment's BOXOFFICE_HOLD_TTL.
	HoldTTL time.Duration
}

// Phase returns where the onsale stands at now.
func (s Settings) Phase(now time.Time) Phase {
	switch {
	case s.Paused:
		return PhasePaused
	case s.OpensAt != nil && now.Before(*s.OpensAt):
		return PhasePre
	}
	return PhaseOpen
}

// Onsales reads and writes onsale settings in PostgreSQL.
type Onsales struct {
	pool *pgxpool.Pool
}

// NewOnsales returns settings stored in pool's database.
func NewOnsales(pool *pgxpool.Pool) *Onsales { return &Onsales{pool: pool} }

func fromRow(r sqlcgen.Onsale) Settings {
	s := Settings{OpensAt: r.OpensAt, Paused: r.Paused}
	if r.MaxRate != nil {
		s.MaxRate = int(*r.MaxRate)
	}
	if r.SeatLimit != nil {
		s.SeatLimit = int(*r.SeatLimit)
	}
	if r.PaymentAttempts != nil {
		s.PaymentAttempts = int(*r.PaymentAttempts)
	}
	if r.HoldTtlSeconds != nil {
		s.HoldTTL = time.Duration(*r.HoldTtlSeconds) * time.Second
	}
	return s
}

func nonZero(n int) *int32 {
	if n <= 0 {
		return nil
	}
	v := int32(n)
	return &v
}

// Get returns the event's settings; an event without a row has the
// defaults.
func (o *Onsales) Get(ctx context.Context, eventID uuid.UUID) (Settings, error) {
	row, err := sqlcgen.New().OnsaleGet(ctx, db.Interpreting(o.pool), eventID)
	if errors.Is(err, db.ErrNotFound) {
		return Settings{}, nil
	} else if err != nil {
		return Settings{}, fmt.Errorf("get onsale settings: %w", err)
	}
	return fromRow(row), nil
}

// Update applies change to the event's settings in one transaction and
// returns the result.
func (o *Onsales) Update(ctx context.Context, eventID uuid.UUID, change func(*Settings)) (Settings, error) {
	return db.WithTxV(ctx, o.pool, func(ctx context.Context, tx pgx.Tx) (Settings, error) {
		q := sqlcgen.New()
		var s Settings
		row, err := q.OnsaleGetForUpdate(ctx, tx, eventID)
		switch {
		case err == nil:
			s = fromRow(row)
		case !errors.Is(err, db.ErrNotFound):
			return Settings{}, fmt.Errorf("lock onsale settings: %w", err)
		}
		change(&s)
		row, err = q.OnsaleUpsert(ctx, tx, sqlcgen.OnsaleUpsertParams{
			EventID: eventID, OpensAt: s.OpensAt, Paused: s.Paused, MaxRate: nonZero(s.MaxRate), SeatLimit: nonZero(s.SeatLimit),
			PaymentAttempts: nonZero(s.PaymentAttempts), HoldTtlSeconds: nonZero(int(s.HoldTTL / time.Second)),
		})
		if err != nil {
			return Settings{}, fmt.Errorf("write onsale settings: %w", err)
		}
		return fromRow(row), nil
	})
}
