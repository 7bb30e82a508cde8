package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/testkit/dbtest"
)

func TestClassifyTerminalAnswersNeedReview(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		class  string
		want   verdict
	}{
		{http.StatusOK, ClassNone, verdictSuccess},
		{http.StatusMovedPermanently, ClassRedirect, verdictReview},
		{http.StatusBadRequest, ClassHTTP4xx, verdictReview},
		{http.StatusUnprocessableEntity, ClassHTTP4xx, verdictReview},
		{http.StatusRequestTimeout, ClassHTTP408, verdictRetry},
		{http.StatusTooManyRequests, ClassHTTP429, verdictRetry},
		{http.StatusGone, ClassGone, verdictGone},
		{http.StatusInternalServerError, ClassHTTP5xx, verdictRetry},
		{http.StatusNotImplemented, ClassHTTP5xx, verdictReview},
		{http.StatusBadGateway, ClassHTTP5xx, verdictRetry},
		{http.StatusServiceUnavailable, ClassHTTP5xx, verdictRetry},
		{http.StatusHTTPVersionNotSupported, ClassHTTP5xx, verdictReview},
	} {
		class, v := classify(tc.status, nil)
		require.Equal(t, tc.class, class, tc.status)
		require.Equal(t, tc.want, v, tc.status)
	}
	class, v := classify(0, ErrRefusedURL)
	require.Equal(t, ClassRefused, class)
	require.Equal(t, verdictTerminal, v, "a refused address is dead, not for review: no receiver answered")
}

// redeliveryRow is a webhook_redeliveries record.
type redeliveryRow struct {
	Kind        string
	RequestedBy string
	Reason      string
	Deliveries  int64
	Until       *time.Time
}

func (b *testBundle) redeliveries(t *testing.T, org uuid.UUID) []redeliveryRow {
	t.Helper()
	rows, err := b.pool.Query(context.Background(),
		"SELECT kind, requested_by, reason, deliveries, until FROM webhook_redeliveries WHERE organizer_id = $1 ORDER BY created_at, id", org)
	require.NoError(t, err)
	defer rows.Close()
	var out []redeliveryRow
	for rows.Next() {
		var r redeliveryRow
		require.NoError(t, rows.Scan(&r.Kind, &r.RequestedBy, &r.Reason, &r.Deliveries, &r.Until))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestNeedsReview(t *testing.T) {
	t.Parallel()

	for _, code := range []int{http.StatusBadRequest, http.StatusNotImplemented, http.StatusHTTPVersionNotSupported} {
		t.Run(fmt.Sprintf("Status%dWaitsForReviewWithOneNotice", code), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			org := uuid.New()
			refusing := newReceiver(t, status(code))
			e := b.endpoint(t, org, refusing.URL, EndpointParams{EventTypes: []string{EventOrderPaid}})
			ops := newReceiver(t, status(http.StatusOK))
			b.endpoint(t, org, ops.URL, EndpointParams{EventTypes: []string{EventDeliveryNeedsReview}})
			msg := b.message(t, org, EventOrderPaid)
			d, _ := b.run(t, b.dispatcherConfig(), nil)

			req := waitRequest(t, ops, "the delivery.needs_review notice")
			var body struct {
				Type string                  `json:"type"`
				Data DeliveryNeedsReviewData `json:"data"`
			}
			require.NoError(t, json.Unmarshal(req.body, &body))
			require.Equal(t, EventDeliveryNeedsReview, body.Type)
			_, class := lastErrorOf(code)
			require.Equal(t, DeliveryNeedsReviewData{
				EndpointID: e.ID, MessageID: MessageID(msg), EventType: EventOrderPaid, Attempts: 1, StatusCode: code, LastError: class,
			}, body.Data)
			require.Equal(t, deliveryRow{StatusNeedsReview, 1}, b.delivery(t, msg))
			// A retry would come after 100ms: a canary due 300ms from now is
			// delivered only once the dispatcher has claimed past that.
			b.canary(t, 300*time.Millisecond)()
			require.Len(t, refusing.requests(), 1, "a delivery that needs review is not retried")
			require.Equal(t, int64(1), dbtest.Count(t, b.pool,
				"SELECT count(*) FROM webhook_messages WHERE organizer_id = $1 AND event_type = 'delivery.needs_review'", org))
			ms, err := b.svc.Messages(context.Background(), org, MessageFilter{Status: DeliveryNeedsReview, Limit: 10})
			require.NoError(t, err)
			require.Len(t, ms, 1)
			require.Equal(t, msg, ms[0].ID)
			waitFor(t, 5*time.Second, "the review gauge", func() bool {
				d.refreshStats(context.Background())
				return value(t, d.metrics.needingReview) == 1
			})
		})
	}

	t.Run("RecoverRetriesFromReviewAndRecordsWhoAndWhy", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		fixed := make(chan struct{})
		rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			select {
			case <-fixed:
				w.WriteHeader(http.StatusNoContent)
			default:
				w.WriteHeader(http.StatusUnprocessableEntity)
			}
		})
		e := b.endpoint(t, org, rc.URL, EndpointParams{})
		msg := b.message(t, org, EventOrderPaid)
		d, _ := b.run(t, b.dispatcherConfig(), nil)
		waitFor(t, 5*time.Second, "needs review", func() bool { return b.delivery(t, msg).Status == StatusNeedsReview })

		close(fixed)
		n, err := b.svc.Recover(context.Background(), org, e.ID, RecoverParams{
			Since: time.Now().Add(-time.Hour), RedeliveryRequest: RedeliveryRequest{RequestedBy: "user:" + org.String(), Reason: "receiver accepts order.paid again"},
		})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		waitFor(t, 5*time.Second, "success", func() bool { return b.delivery(t, msg).Status == StatusSucceeded })

		a := b.attempts(t, org, msg)
		require.Len(t, a, 2)
		require.Equal(t, TriggerOriginal, a[0].Trigger)
		require.Equal(t, ClassHTTP4xx, a[0].ErrorClass)
		require.Equal(t, TriggerRecover, a[1].Trigger)
		require.Equal(t, ClassNone, a[1].ErrorClass)
		waitFor(t, 5*time.Second, "the recover attempt counted", func() bool {
			return value(t, d.metrics.attempts.WithLabelValues(ClassNone, TriggerRecover)) == 1
		})
		require.Equal(t, []redeliveryRow{{
			Kind: TriggerRecover, RequestedBy: "user:" + org.String(), Reason: "receiver accepts order.paid again", Deliveries: 1,
		}}, b.redeliveries(t, org))
	})

	t.Run("ReplayRetriesFromReviewAndRecordsWhoAndWhy", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		e := b.endpoint(t, org, "http://127.0.0.1:9/x", EndpointParams{})
		msg := b.message(t, org, EventOrderPaid)
		dbtest.Exec(t, b.pool, "UPDATE webhook_deliveries SET status = 'needs_review', attempts = 1 WHERE message_id = $1", msg)

		n, err := b.svc.Replay(context.Background(), org, msg, ReplayParams{EndpointID: &e.ID, RedeliveryRequest: RedeliveryRequest{RequestedBy: "api_key:k", Reason: "one more try"}})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		require.Equal(t, deliveryRow{StatusPending, 1}, b.delivery(t, msg))
		require.Equal(t, []redeliveryRow{{Kind: TriggerReplay, RequestedBy: "api_key:k", Reason: "one more try", Deliveries: 1}}, b.redeliveries(t, org))
	})

	t.Run("RecoverTakesUntil", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		e := b.endpoint(t, org, "http://127.0.0.1:9/x", EndpointParams{})
		now := time.Now()
		old, mid, recent := b.message(t, org, EventOrderPaid), b.message(t, org, EventOrderPaid), b.message(t, org, EventOrderPaid)
		for msg, ago := range map[uuid.UUID]time.Duration{old: 3 * time.Hour, mid: 2 * time.Hour, recent: time.Hour} {
			dbtest.Exec(t, b.pool, "UPDATE webhook_deliveries SET status = 'needs_review', attempts = 1, created_at = $2 WHERE message_id = $1",
				msg, now.Add(-ago))
		}
		until := now.Add(-90 * time.Minute)
		_, err := b.svc.Recover(context.Background(), org, e.ID, RecoverParams{Since: now.Add(-150 * time.Minute), Until: &until, RedeliveryRequest: RedeliveryRequest{Reason: "the 2h window"}})
		require.NoError(t, err)
		require.Equal(t, StatusNeedsReview, b.delivery(t, old).Status, "before since")
		require.Equal(t, StatusPending, b.delivery(t, mid).Status, "in the window")
		require.Equal(t, StatusNeedsReview, b.delivery(t, recent).Status, "at or after until")
		rs := b.redeliveries(t, org)
		require.Len(t, rs, 1)
		require.Equal(t, int64(1), rs[0].Deliveries)
		require.Equal(t, "unknown", rs[0].RequestedBy, "a caller that does not say who is recorded as unknown")
		require.WithinDuration(t, until, *rs[0].Until, time.Millisecond)

		_, err = b.svc.Recover(context.Background(), org, e.ID, RecoverParams{Since: until, Until: &until})
		require.ErrorIs(t, err, ErrInvalidWindow)
		require.Len(t, b.redeliveries(t, org), 1, "a refused recover records nothing")
	})

	t.Run("ConcurrentRetriesFromReviewQueueEachDeliveryOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		e := b.endpoint(t, org, "http://127.0.0.1:9/x", EndpointParams{})
		const deliveries = 20
		for range deliveries {
			b.message(t, org, EventOrderPaid)
		}
		dbtest.Exec(t, b.pool, "UPDATE webhook_deliveries SET status = 'needs_review', attempts = 1 WHERE endpoint_id = $1", e.ID)

		const callers = 8
		queued := make([]int64, callers)
		errs := race(callers, func(i int) error {
			n, err := b.svc.Recover(context.Background(), org, e.ID, RecoverParams{
				Since: time.Now().Add(-time.Hour), RedeliveryRequest: RedeliveryRequest{RequestedBy: "user:" + uuid.NewString(), Reason: "race"},
			})
			queued[i] = n
			return err
		})
		require.NoError(t, errors.Join(errs...))
		var sum int64
		for _, n := range queued {
			sum += n
		}
		require.Equal(t, int64(deliveries), sum, "each delivery queued by exactly one of the concurrent recovers")
		require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status <> 'pending'", e.ID))
		require.Equal(t, int64(deliveries), dbtest.Count(t, b.pool,
			"SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND next_trigger = 'recover' AND retry_base = 1", e.ID))
		rs := b.redeliveries(t, org)
		require.Len(t, rs, callers, "every request is recorded, the ones that found nothing left included")
		var recorded int64
		for _, r := range rs {
			recorded += r.Deliveries
		}
		require.Equal(t, int64(deliveries), recorded)
	})
}

// lastErrorOf is the error class and last_error a terminal status gives.
func lastErrorOf(code int) (string, string) {
	class, _ := classify(code, nil)
	return class, lastError(result{Class: class, StatusCode: code})
}
