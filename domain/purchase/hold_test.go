package purchase_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"boxoffice/domain/catalog"
	"boxoffice/domain/purchase"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type testBundle struct {
	pool  *pgxpool.Pool
	event catalog.Event
	seats []uuid.UUID
}

func setup(t testing.TB) (*purchase.Service, *testBundle) {
	t.Helper()
	pool := dbtest.New(t)
	ev := fixture.NewEvent(t, pool, fixture.EventSpec{Name: "t", StartsAt: time.Now(), Currency: "usd", Rows: 2, PriceMinor: 2500})
	seats := ev.Seats
	svc := purchase.NewService(pool, slog.New(slog.NewTextHandler(io.Discard, nil)), purchase.Config{HoldTTL: 7 * time.Minute})
	return svc, &testBundle{pool: pool, event: ev.Event, seats: seats}
}

// The HoldCreated row is written by SQL (hold_reserve) and read by Go
// consumers: the two must agree on every field.
func TestHoldWritesHoldCreatedEnvelope(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	ctx := context.Background()
	user := uuid.New()
	h, err := svc.Hold(ctx, purchase.HoldParams{
		UserID: user, EventID: b.event.ID, SeatIDs: []uuid.UUID{b.seats[3], b.seats[1]},
		IdempotencyKey: "k", CorrelationID: "corr-1",
	})
	require.NoError(t, err)
	require.False(t, h.Replayed)
	require.WithinDuration(t, time.Now().Add(7*time.Minute), h.ExpiresAt, 10*time.Second)

	var id uuid.UUID
	var subject, eventType string
	var aggregate uuid.UUID
	var raw []byte
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT id, subject, event_type, aggregate_id, envelope FROM outbox WHERE event_type = 'HoldCreated'").
		Scan(&id, &subject, &eventType, &aggregate, &raw))
	var env outbox.Envelope
	require.NoError(t, json.Unmarshal(raw, &env))
	require.Equal(t, id, env.EventID)
	require.Equal(t, outbox.TypeHoldCreated, env.EventType)
	require.Equal(t, eventType, env.EventType)
	require.Equal(t, subject, env.Subject())
	require.Equal(t, outbox.SchemaVersion, env.SchemaVersion)
	require.Equal(t, outbox.AggregateOrder, env.AggregateType)
	require.Equal(t, h.OrderID, env.AggregateID)
	require.Equal(t, aggregate, env.AggregateID)
	require.Equal(t, "corr-1", env.CorrelationID)
	require.WithinDuration(t, time.Now(), env.OccurredAt, 10*time.Second)

	var payload outbox.HoldCreated
	dec := json.NewDecoder(bytesReader(env.Payload))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&payload))
	lo, hi := b.seats[1], b.seats[3]
	if lo.String() > hi.String() {
		lo, hi = hi, lo
	}
	require.Equal(t, outbox.HoldCreated{
		OrderID: h.OrderID, HoldID: h.HoldID, EventID: b.event.ID, UserID: user,
		SeatIDs: []uuid.UUID{lo, hi}, AmountMinor: 5000, Currency: "usd", ExpiresAt: payload.ExpiresAt,
	}, payload)
	require.True(t, h.ExpiresAt.Equal(payload.ExpiresAt))
}

// The hold transaction asks for the order's PaymentIntent itself: its
// PaymentAuthorizationRequested row is written by SQL (hold_reserve) and
// read by the payments consumer, so the two must agree on every field, and
// the envelope is the one the saga's emit wrote when a saga step turned
// HoldCreated into it: the HoldCreated's correlation, caused by it. A
// replayed hold writes neither row again.
func TestHoldWritesPaymentAuthorizationRequestedEnvelope(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	ctx := context.Background()
	p := purchase.HoldParams{
		UserID: uuid.New(), EventID: b.event.ID, SeatIDs: []uuid.UUID{b.seats[3], b.seats[1]},
		IdempotencyKey: "k", CorrelationID: "corr-2",
	}
	h, err := svc.Hold(ctx, p)
	require.NoError(t, err)

	type row struct {
		id, aggregate      uuid.UUID
		subject, eventType string
		env                outbox.Envelope
	}
	rows, err := b.pool.Query(ctx, "SELECT id, subject, event_type, aggregate_id, envelope FROM outbox ORDER BY seq")
	require.NoError(t, err)
	var got []row
	for rows.Next() {
		var r row
		var raw []byte
		require.NoError(t, rows.Scan(&r.id, &r.subject, &r.eventType, &r.aggregate, &raw))
		dec := json.NewDecoder(bytesReader(raw))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&r.env))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, 2, "HoldCreated, then PaymentAuthorizationRequested")
	created, req := got[0], got[1]
	require.Equal(t, outbox.TypeHoldCreated, created.eventType)

	env := req.env
	require.Equal(t, req.id, env.EventID)
	require.NotEqual(t, created.id, env.EventID)
	require.Equal(t, outbox.TypePaymentAuthorizationRequested, env.EventType)
	require.Equal(t, req.eventType, env.EventType)
	require.Equal(t, req.subject, env.Subject())
	require.Equal(t, outbox.SchemaVersion, env.SchemaVersion)
	require.Equal(t, outbox.AggregateOrder, env.AggregateType)
	require.Equal(t, h.OrderID, env.AggregateID)
	require.Equal(t, req.aggregate, env.AggregateID)
	require.Equal(t, "corr-2", env.CorrelationID)
	require.Equal(t, created.env.CorrelationID, env.CorrelationID)
	require.Equal(t, created.id.String(), env.CausationID)
	require.WithinDuration(t, time.Now(), env.OccurredAt, 10*time.Second)

	var payload outbox.PaymentAuthorizationRequested
	dec := json.NewDecoder(bytesReader(env.Payload))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&payload))
	require.Equal(t, outbox.PaymentAuthorizationRequested{
		OrderID: h.OrderID, HoldID: h.HoldID, AmountMinor: 5000, Currency: "usd",
	}, payload)

	// The Go form of the same event, as outbox.NewOrderEvent builds it,
	// has the same fields.
	goEnv, _, err := outbox.NewOrderEvent(outbox.TypePaymentAuthorizationRequested, h.OrderID, env.OccurredAt,
		created.env.CorrelationID, created.id.String(), payload)
	require.NoError(t, err)
	goEnv.EventID = env.EventID
	goEnv.OccurredAt = env.OccurredAt.UTC()
	env.OccurredAt = env.OccurredAt.UTC()
	require.JSONEq(t, string(goEnv.Payload), string(env.Payload))
	goEnv.Payload, env.Payload = nil, nil
	require.Equal(t, goEnv, env)

	again, err := svc.Hold(ctx, p)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.EqualValues(t, 2, dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox"))
}

func TestHoldReplayMatchesOriginal(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	ctx := context.Background()
	p := purchase.HoldParams{UserID: uuid.New(), EventID: b.event.ID, SeatIDs: []uuid.UUID{b.seats[0]}, IdempotencyKey: "k"}
	first, err := svc.Hold(ctx, p)
	require.NoError(t, err)
	again, err := svc.Hold(ctx, p)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	again.Replayed = false
	require.Equal(t, first, again)

	p.SeatIDs = []uuid.UUID{b.seats[1]}
	_, err = svc.Hold(ctx, p)
	require.ErrorIs(t, err, purchase.ErrIdempotencyConflict)
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// TestHoldSeatLimitUnderConcurrentHolds: one buyer fires ten one-seat holds
// at once at an event that allows two seats per buyer. The check inside
// the hold transaction lets exactly two through; a check before it alone
// would let them all pass together. A retry of a successful hold is still
// answered from its key, and another buyer is not affected.
func TestHoldSeatLimitUnderConcurrentHolds(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	ctx := context.Background()
	buyer := uuid.New()
	const limit, tries = 2, 10
	var (
		mu      sync.Mutex
		held    []purchase.HoldParams
		refused int
	)
	var g errgroup.Group
	for i := range tries {
		g.Go(func() error {
			p := purchase.HoldParams{UserID: buyer, EventID: b.event.ID, SeatIDs: []uuid.UUID{b.seats[i]},
				IdempotencyKey: uuid.NewString(), SeatLimit: limit}
			_, err := svc.Hold(ctx, p)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				held = append(held, p)
			case errors.Is(err, purchase.ErrSeatLimit):
				refused++
			default:
				return err
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	require.Len(t, held, limit)
	require.Equal(t, tries-limit, refused)
	require.Equal(t, int64(limit), dbtest.Count(t, b.pool, `SELECT count(*) FROM orders WHERE user_id = $1`, buyer))

	again, err := svc.Hold(ctx, held[0])
	require.NoError(t, err, "a retried hold is answered from its key, whatever the limit")
	require.True(t, again.Replayed)

	_, err = svc.Hold(ctx, purchase.HoldParams{UserID: uuid.New(), EventID: b.event.ID, SeatIDs: []uuid.UUID{b.seats[tries]},
		IdempotencyKey: uuid.NewString(), SeatLimit: limit})
	require.NoError(t, err, "another buyer has a limit of their own")
}
