package webhooks

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/sqlcgen"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type testBundle struct {
	pool    *pgxpool.Pool
	logs    *testkit.Log
	logger  *slog.Logger
	reg     *prometheus.Registry
	svc     *Service
	mu      sync.Mutex
	secrets []string
}

// setup gives a test its database, a logger whose output is scanned for
// every endpoint secret when the test ends, and a Service that allows
// private addresses (the receivers are httptest servers on loopback).
func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{pool: dbtest.New(t), logs: testkit.NewLog(t), reg: prometheus.NewRegistry()}
	b.logger = b.logs.Logger
	b.svc = NewService(b.pool, ServiceConfig{Guard: &Guard{AllowPrivate: true}, Keys: testKeys, Logger: b.logger})
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, s := range b.secrets {
			// The endpoint secret, and its key without the prefix.
			b.logs.RequireNoSecrets(t, s, s[len(SecretPrefix):])
		}
	})
	return b
}

func (b *testBundle) remember(secret string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.secrets = append(b.secrets, secret)
}

// endpoint creates an endpoint of organizer org for url.
func (b *testBundle) endpoint(t *testing.T, org uuid.UUID, url string, p EndpointParams) Endpoint {
	t.Helper()
	p.URL = url
	e, err := b.svc.Create(context.Background(), org, p)
	require.NoError(t, err)
	require.NotEmpty(t, e.Secret)
	b.remember(e.Secret)
	return e
}

// message stores a message for org and queues it for org's endpoints, as
// the fan-out does, and returns its id.
func (b *testBundle) message(t *testing.T, org uuid.UUID, eventType string) uuid.UUID {
	t.Helper()
	return b.messageDue(t, org, eventType, 0)
}

// messageDue is message with the deliveries first due after from now. It
// commits them with their due time, so no dispatcher sees them due sooner.
func (b *testBundle) messageDue(t *testing.T, org uuid.UUID, eventType string, after time.Duration) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	q := sqlcgen.New()
	body, err := encodeBody(eventType, time.Now(), OrderData{OrderID: uuid.New(), EventID: uuid.New(), AmountMinor: 1000, Currency: "eur"})
	require.NoError(t, err)
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	id, err := q.WebhookMessageInsert(ctx, tx, sqlcgen.WebhookMessageInsertParams{
		ID: uuid.Must(uuid.NewV7()), OrganizerID: org, EventType: eventType, Payload: body,
		SourceKey: uuid.NewString(), CreatedAt: time.Now(),
	})
	require.NoError(t, err)
	_, err = q.WebhookDeliveryFanOut(ctx, tx, sqlcgen.WebhookDeliveryFanOutParams{MessageID: id, OrganizerID: org, EventType: eventType})
	require.NoError(t, err)
	if after > 0 {
		_, err = tx.Exec(ctx, "UPDATE webhook_deliveries SET next_attempt_at = now() + make_interval(secs => $2) WHERE message_id = $1", id, after.Seconds())
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))
	return id
}

// dispatcherConfig is a fast test configuration.
func (b *testBundle) dispatcherConfig() DispatcherConfig {
	return DispatcherConfig{
		Guard:         &Guard{AllowPrivate: true},
		Keys:          testKeys,
		RetrySchedule: []time.Duration{0, 100 * time.Millisecond, 400 * time.Millisecond, time.Second},
		Timeout:       2 * time.Second,
		Lease:         4 * time.Second,
		PollInterval:  10 * time.Millisecond,
		BusyDelay:     50 * time.Millisecond,
		FlushInterval: 5 * time.Millisecond,
		Logger:        b.logger,
		Registerer:    b.reg,
	}
}

// run starts a dispatcher and stops it when the test ends.
func (b *testBundle) run(t *testing.T, cfg DispatcherConfig, hook func(*result) bool) (*Dispatcher, context.CancelFunc) {
	t.Helper()
	d, err := NewDispatcher(b.pool, cfg)
	require.NoError(t, err)
	d.afterSendFunc = hook
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		require.NoError(t, d.Run(ctx))
	}()
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return d, cancel
}

// request is what a receiver saw.
type request struct {
	at     time.Time
	header http.Header
	body   []byte
}

// receiver is an httptest server that answers with handle and records
// every request.
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []request
	got  chan request
}

func newReceiver(t *testing.T, handle func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rc := &receiver{got: make(chan request, 100000)}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := request{at: time.Now(), header: r.Header.Clone(), body: body}
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, req)
		n := len(rc.reqs)
		rc.mu.Unlock()
		rc.got <- req
		handle(n, w, r)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) requests() []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]request(nil), rc.reqs...)
}

func status(code int) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNow(t, "timed out waiting for "+what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type deliveryRow struct {
	Status   string
	Attempts int32
}

func (b *testBundle) delivery(t *testing.T, msg uuid.UUID) deliveryRow {
	t.Helper()
	var d deliveryRow
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT status, attempts FROM webhook_deliveries WHERE message_id = $1", msg).Scan(&d.Status, &d.Attempts))
	return d
}

func (b *testBundle) attempts(t *testing.T, org, msg uuid.UUID) []Attempt {
	t.Helper()
	a, err := b.svc.Attempts(context.Background(), org, msg)
	require.NoError(t, err)
	return a
}
