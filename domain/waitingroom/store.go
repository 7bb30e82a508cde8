package waitingroom

import (
	"context"
	"time"

	"github.com/google/uuid"

	"boxoffice/platform/fault"
)

// ErrUnavailable is returned by a Store that cannot reach its backing
// service (Redis). The waiting room fails closed on it: nobody joins, polls
// or is admitted until the store answers again.
var ErrUnavailable = fault.New(fault.CodeUnavailable, "waiting room store unavailable")

// Phase is where an onsale stands for a buyer who joins now.
type Phase string

const (
	// PhasePre is before a scheduled opening: joiners go into the
	// pre-queue, whose order is drawn at random.
	PhasePre Phase = "scheduled"
	// PhaseOpen admits buyers at the release rate, at once while nobody
	// is queued and there is spare capacity.
	PhaseOpen Phase = "open"
	// PhasePaused queues joiners in arrival order and admits nobody.
	PhasePaused Phase = "paused"
)

// Status is a buyer's state in an event's waiting room.
type Status string

const (
	// StatusNone: the buyer is neither queued nor admitted (never joined,
	// or their admission expired).
	StatusNone Status = "none"
	// StatusQueued: the buyer waits; Position says how many are ahead.
	StatusQueued Status = "queued"
	// StatusAdmitted: the buyer may hold seats with their admission.
	StatusAdmitted Status = "admitted"
	// StatusLimited: the request was over a rate limit and did nothing.
	StatusLimited Status = "rate_limited"
	// StatusRevoked: the buyer was admitted, and the organizer revoked the
	// admission; holds refuse it until it would have expired. Only the
	// Room reports it (a Store answers StatusAdmitted).
	StatusRevoked Status = "revoked"
)

// Admission is a recorded admission: what the token binds besides the
// user, event and cell.
type Admission struct {
	JTI       uuid.UUID
	IssuedAt  time.Time
	ExpiresAt time.Time
}

// Entry is the answer of Join and Poll.
type Entry struct {
	Status Status
	// Ahead is how many buyers are ahead in the queue (StatusQueued).
	Ahead int64
	// Admission is set for StatusAdmitted.
	Admission Admission
	// RetryAfter is set for StatusLimited.
	RetryAfter time.Duration
	// Used is how many requests the buyer made in the current one-second
	// window of Limits.PerUser, this one included; 0 when that limit is
	// off.
	Used int
}

// Limits are the per-second request limits of one event's waiting room;
// zero disables a limit.
type Limits struct {
	PerUser int
	PerIP   int
}

// JoinParams are what Join and Poll need. The Room fills them.
type JoinParams struct {
	EventID uuid.UUID
	UserID  uuid.UUID
	IP      string
	Now     time.Time
	Limits  Limits
	// Phase, Rate, Burst, TTL, JTI and PreScore matter to Join only.
	Phase Phase
	// Rate is admissions per second; Burst the most admissions at once.
	Rate, Burst float64
	// TTL is the admission's lifetime.
	TTL time.Duration
	// JTI identifies the admission if the buyer is admitted at once.
	JTI uuid.UUID
	// PreScore places the buyer in the pre-queue: a uniformly random
	// number in [0, 2^52), drawn with crypto/rand.
	PreScore uint64
	// Seats, when positive, bounds admission at once as AdmitParams.Seats
	// bounds the admitter: the buyer is queued unless Seats exceeds the
	// admissions of the last ClaimWindow. 0: no bound.
	Seats int
	// ClaimWindow is how long an admission counts against the seats left
	// (see AdmitParams.Seats); a buyer admitted at once is recorded too.
	ClaimWindow time.Duration
}

// AdmitParams are what Admit needs.
type AdmitParams struct {
	EventID     uuid.UUID
	Now         time.Time
	Rate, Burst float64
	TTL         time.Duration
	// Max bounds how many buyers one call admits.
	Max int
	// Seats, when positive, is how many seats are left: the call admits
	// at most Seats less the buyers admitted in the last ClaimWindow (by
	// any process sharing the store, at once on joining included), so
	// seats that come back admit about as many buyers. 0: no bound (a
	// caller with no seat left admits nobody and does not call).
	Seats int
	// ClaimWindow is how long an admission counts against Seats.
	ClaimWindow time.Duration
}

// Store keeps the queues, admissions, rate buckets and revocations. Every
// method is atomic per event: no buyer is queued twice, nor admitted twice
// for one queue entry, whichever processes call it concurrently. Methods
// return an error wrapping ErrUnavailable when the backing service is
// unreachable.
type Store interface {
	// Join queues the buyer, admits them at once (open phase, nobody
	// queued, a token in the bucket), or returns where they already are:
	// joining twice changes nothing.
	Join(ctx context.Context, p JoinParams) (Entry, error)
	// Poll returns where the buyer is without changing it.
	Poll(ctx context.Context, p JoinParams) (Entry, error)
	// Admit admits as many buyers from the head of the queue as the
	// event's token bucket allows, and returns them in queue order.
	Admit(ctx context.Context, p AdmitParams) ([]uuid.UUID, error)
	// ActiveEvents returns the events with someone queued.
	ActiveEvents(ctx context.Context) ([]uuid.UUID, error)
	// QueueLength returns how many buyers wait for the event.
	QueueLength(ctx context.Context, eventID uuid.UUID) (int64, error)
	// Revoke marks an admission revoked until it expires.
	Revoke(ctx context.Context, jti uuid.UUID, expiresAt time.Time) error
	// Revoked returns the revoked admissions that have not expired at now.
	Revoked(ctx context.Context, now time.Time) (map[uuid.UUID]time.Time, error)
	// ShareRate records a process's R and returns the cell's: the lowest
	// R that any process sharing the store recorded within p.TTL of
	// p.Now, p's own included. Records older than that are forgotten: a
	// process that stopped no longer holds the cell back.
	ShareRate(ctx context.Context, p ShareRateParams) (float64, error)
}

// ShareRateParams is one process's report of its R to the cell.
type ShareRateParams struct {
	// Process names the reporting process; a report replaces its
	// previous one.
	Process string
	Rate    float64
	Now     time.Time
	// TTL is how long a report counts. The processes' clocks are
	// compared, so it must be well above their skew.
	TTL time.Duration
}

// preScoreSpan bounds pre-queue scores; later arrivals are scored
// preScoreSpan + their arrival number, so the whole pre-queue goes first.
// Both stay below 2^53, exact in a float64 (a Redis sorted-set score).
const preScoreSpan = 1 << 52
