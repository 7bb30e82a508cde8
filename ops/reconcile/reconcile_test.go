package reconcile_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/payments"
	"boxoffice/domain/payments/sandbox"
	"boxoffice/domain/purchase"
	"boxoffice/ops/reconcile"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// TestReconcileRepairsEachMismatchOnce plants one order per kind of
// mismatch (and some that agree) against intents at the sandbox provider,
// then reconciles: a dry run writes nothing, the first run repairs each
// mismatch with the right event, the second changes nothing.
func TestReconcileRepairsEachMismatchOnce(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ev := fixture.NewEvent(t, pool, fixture.EventSpec{Name: "reconcile", StartsAt: time.Now(), SeatsPerRow: 20})
	seats := ev.Seats
	svc := purchase.NewService(pool, logger, purchase.Config{})
	sb, err := sandbox.New(pool, sandbox.Config{Logger: logger})
	require.NoError(t, err)

	// order creates an order of one seat whose intent reaches intent
	// status at the sandbox, and puts the order in orderStatus.
	next := 0
	order := func(intent payments.IntentStatus, orderStatus string) (uuid.UUID, string) {
		t.Helper()
		h, err := svc.Hold(ctx, purchase.HoldParams{
			UserID: uuid.New(), EventID: ev.ID, SeatIDs: []uuid.UUID{seats[next]}, IdempotencyKey: "k", CorrelationID: "journey",
		})
		require.NoError(t, err)
		next++
		in, err := sb.CreateIntent(ctx, payments.CreateIntentParams{
			OrderID: h.OrderID, AmountMinor: 1000, Currency: "eur", IdempotencyKey: "authorize:" + uuid.NewString(),
		})
		require.NoError(t, err)
		if intent != payments.StatusRequiresPaymentMethod {
			_, err = sb.Authorize(ctx, in.ID)
			require.NoError(t, err)
		}
		if intent == payments.StatusSucceeded {
			_, err = sb.Capture(ctx, in.ID, "capture:"+h.OrderID.String())
			require.NoError(t, err)
		}
		dbtest.Exec(t, pool, `INSERT INTO payments (order_id, provider, payment_intent_id, client_secret, status, amount_minor, currency)
			VALUES ($1, 'sandbox', $2, $3, $4, 1000, 'eur')`, h.OrderID, in.ID, in.ClientSecret, string(intent))
		dbtest.Exec(t, pool, "UPDATE orders SET status = $2 WHERE id = $1", h.OrderID, orderStatus)
		if orderStatus == "ticketed" {
			dbtest.Exec(t, pool, "INSERT INTO tickets (id, order_id, seat_id, event_id, issued_at) SELECT gen_random_uuid(), $1, id, event_id, now() FROM seats WHERE id = $2", h.OrderID, seats[next-1])
		}
		return h.OrderID, in.ID
	}
	lostAuthorization, _ := order(payments.StatusRequiresCapture, "pending_payment")
	releasedAuthorized, _ := order(payments.StatusRequiresCapture, "failed")
	lostCapture, _ := order(payments.StatusSucceeded, "capture_pending")
	releasedCaptured, _ := order(payments.StatusSucceeded, "canceled")
	paidNoTickets, _ := order(payments.StatusSucceeded, "paid")
	bothLost, _ := order(payments.StatusSucceeded, "pending_payment")
	// Commands lost on their way (dead-lettered, or never published):
	// states every order passes through, repaired once they have lasted
	// Settle.
	aged := func(orderID uuid.UUID) {
		dbtest.Exec(t, pool, "UPDATE orders SET updated_at = now() - interval '1 hour' WHERE id = $1", orderID)
	}
	captureNotSent, _ := order(payments.StatusRequiresCapture, "capture_pending")
	aged(captureNotSent)
	cancelNotSent, _ := order(payments.StatusRequiresCapture, "failed")
	dbtest.Exec(t, pool, "UPDATE orders SET authorization_cancel_requested_at = now() - interval '1 hour' WHERE id = $1", cancelNotSent)
	aged(cancelNotSent)
	refundNotSent, _ := order(payments.StatusSucceeded, "refunding")
	aged(refundNotSent)
	refundNotApplied, refundedIntent := order(payments.StatusSucceeded, "refunding")
	_, err = sb.Refund(ctx, refundedIntent, 0, "refund:"+refundNotApplied.String())
	require.NoError(t, err)
	aged(refundNotApplied)
	fine := []uuid.UUID{}
	for _, c := range []struct {
		intent payments.IntentStatus
		order  string
	}{
		{payments.StatusSucceeded, "ticketed"},
		{payments.StatusRequiresCapture, "capture_pending"},
		{payments.StatusRequiresPaymentMethod, "pending_payment"},
		{payments.StatusSucceeded, "refunding"}, // the refund is on its way
	} {
		id, _ := order(c.intent, c.order)
		fine = append(fine, id)
	}
	// An intent whose order is not in this database.
	stranger, err := sb.CreateIntent(ctx, payments.CreateIntentParams{
		OrderID: uuid.New(), AmountMinor: 1000, Currency: "eur", IdempotencyKey: "authorize:" + uuid.NewString(),
	})
	require.NoError(t, err)
	_, err = sb.Authorize(ctx, stranger.ID)
	require.NoError(t, err)

	outboxCount := func() int64 { return dbtest.Count(t, pool, "SELECT count(*) FROM outbox") }
	types := func(orderID uuid.UUID) []string {
		rows, err := pool.Query(ctx, "SELECT event_type FROM outbox WHERE aggregate_id = $1 AND event_type NOT IN ('HoldCreated', 'PaymentAuthorizationRequested') ORDER BY seq", orderID)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out = append(out, s)
		}
		return out
	}
	from, to := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	cfg := reconcile.Config{Pool: pool, Provider: sb, Logger: logger}
	run := func(dry bool) reconcile.Report {
		cfg.DryRun = dry
		r, err := reconcile.Run(ctx, cfg, from, to)
		require.NoError(t, err)
		var out bytes.Buffer
		require.NoError(t, r.Write(&out))
		t.Logf("%s", out.String())
		return r
	}

	before := outboxCount()
	dry := run(true)
	require.Equal(t, 15, dry.Intents)
	require.Len(t, dry.Findings, 11, "ten mismatches and the stranger")
	require.Equal(t, before, outboxCount(), "a dry run writes nothing")
	require.Zero(t, dbtest.Count(t, pool, "SELECT count(*) FROM reconcile_repairs"))

	first := run(false)
	applied := 0
	for _, f := range first.Findings {
		if f.Applied {
			applied++
		}
		if f.IntentID == stranger.ID {
			require.False(t, f.Applied)
			require.Contains(t, f.Note, "does not exist here")
		}
	}
	require.Equal(t, 10, applied)
	require.Equal(t, []string{outbox.TypePaymentAuthorized}, types(lostAuthorization))
	require.Equal(t, []string{outbox.TypeAuthorizationCancelRequested}, types(releasedAuthorized))
	require.Equal(t, []string{outbox.TypePaymentCaptured}, types(lostCapture))
	require.Equal(t, []string{outbox.TypePaymentCaptured}, types(releasedCaptured), "the saga refunds a capture of a released order")
	require.Equal(t, []string{outbox.TypeTicketIssueRequested}, types(paidNoTickets))
	require.Equal(t, []string{outbox.TypePaymentAuthorized, outbox.TypePaymentCaptured}, types(bothLost))
	require.Equal(t, []string{outbox.TypeCaptureRequested}, types(captureNotSent))
	require.Equal(t, []string{outbox.TypeAuthorizationCancelRequested}, types(cancelNotSent))
	require.Equal(t, []string{outbox.TypeRefundRequested}, types(refundNotSent))
	require.Equal(t, []string{outbox.TypePaymentRefunded}, types(refundNotApplied))
	var refunded outbox.PaymentRefunded
	require.NoError(t, pool.QueryRow(ctx, "SELECT envelope->'payload' FROM outbox WHERE aggregate_id = $1 AND event_type = 'PaymentRefunded'", refundNotApplied).Scan(&refunded))
	require.EqualValues(t, 1000, refunded.AmountRefunded, "the refunded total, as the provider reports it")
	for _, id := range fine {
		require.Empty(t, types(id), "an order that agrees with its intent is left alone")
	}
	require.EqualValues(t, 1, dbtest.Count(t, pool,
		"SELECT count(*) FROM orders WHERE id = $1 AND authorization_cancel_requested_at IS NOT NULL", releasedAuthorized))

	after := outboxCount()
	second := run(false)
	for _, f := range second.Findings {
		require.False(t, f.Applied, "%s repaired twice", f.IntentID)
	}
	require.Equal(t, after, outboxCount(), "a second run changes nothing")
	require.EqualValues(t, 10, dbtest.Count(t, pool, "SELECT count(*) FROM reconcile_repairs"))
}
