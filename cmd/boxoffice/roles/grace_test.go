package roles

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/testkit/dbtest"
)

// A buyer whose bank asks for 3-D Secure as the hold runs out keeps the
// seats for the grace: passed within it, the order is ticketed; passed
// after it, the hold has expired and the order failed, as without a grace.
// Every role runs inside dev; the sandbox sends the webhooks.
func TestPaymentGraceKeepsAHoldInFlight(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	// The challenge's webhook must land while the hold is live (a grace
	// never revives an expired hold), so the hold is made to run out in
	// runOut, not at once; the grace is longer, so it is what keeps it.
	const runOut, grace = 3 * time.Second, 6 * time.Second
	env := func(name string) string {
		return map[string]string{"DATABASE_URL": url, "HTTP_ADDR": "127.0.0.1:0", "OPS_ADDR": "127.0.0.1:0",
			"BOXOFFICE_LOG_LEVEL": "warn", "BOXOFFICE_PAYMENT_GRACE": grace.String()}[name]
	}
	ctx := context.Background()
	out := startDev(t, env)
	re := regexp.MustCompile(`(?s)API\s+(\S+).*Demo event\s+(\S+).*Buyer token\s+(\S+)`)
	require.Eventually(t, func() bool { return re.MatchString(out.String()) }, 60*time.Second, 50*time.Millisecond, "dev printed: %s", out)
	m := re.FindStringSubmatch(out.String())
	api, event, buyer := m[1], m[2], m[3]
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	do := func(method, path, body string, v any) int {
		req, err := http.NewRequest(method, api+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+buyer)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		if v != nil && res.StatusCode < 300 {
			require.NoError(t, json.NewDecoder(res.Body).Decode(v))
		}
		return res.StatusCode
	}
	type order struct {
		Status string
		Hold   struct {
			ExpiresAt    time.Time
			PaymentGrace bool
		}
		Payment *struct{ PaymentIntentID string }
	}
	var seats struct{ Seats []struct{ ID string } }
	require.Equal(t, http.StatusOK, do(http.MethodGet, "/v1/events/"+event+"/seats", "", &seats))

	// challenged holds seat i, waits for its intent, makes the hold run out
	// in runOut (returned as ownExpiry), and has the bank ask for 3-D
	// Secure: the hold is kept until the grace ends.
	challenged := func(i int) (orderID, intent string, ownExpiry, graceEnds time.Time) {
		t.Helper()
		var adm struct{ AdmissionToken string }
		require.Equal(t, http.StatusOK, do(http.MethodPost, "/v1/events/"+event+"/waiting-room", "", &adm))
		req, err := http.NewRequest(http.MethodPost, api+"/v1/events/"+event+"/holds", strings.NewReader(`{"seatIds":["`+seats.Seats[i].ID+`"]}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+buyer)
		req.Header.Set("X-Admission-Token", adm.AdmissionToken)
		req.Header.Set("Idempotency-Key", "grace-"+seats.Seats[i].ID)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var held struct{ OrderID string }
		require.NoError(t, json.NewDecoder(res.Body).Decode(&held))
		res.Body.Close()
		require.Equal(t, http.StatusAccepted, res.StatusCode)
		var o order
		require.Eventually(t, func() bool {
			o = order{}
			return do(http.MethodGet, "/v1/orders/"+held.OrderID, "", &o) == http.StatusOK && o.Payment != nil && o.Payment.PaymentIntentID != ""
		}, 30*time.Second, 20*time.Millisecond)
		require.NoError(t, pool.QueryRow(ctx, "UPDATE holds SET expires_at = now() + $2::interval WHERE order_id = $1 RETURNING expires_at",
			held.OrderID, runOut).Scan(&ownExpiry))
		require.Equal(t, http.StatusOK, do(http.MethodPost, "/v1/sandbox/payment-intents/"+o.Payment.PaymentIntentID+"/challenge", "", nil))
		require.Eventually(t, func() bool {
			o = order{}
			return do(http.MethodGet, "/v1/orders/"+held.OrderID, "", &o) == http.StatusOK && o.Hold.PaymentGrace
		}, 30*time.Second, 20*time.Millisecond, "the challenge did not keep the hold")
		require.Equal(t, "pending_payment", o.Status)
		require.True(t, time.Until(o.Hold.ExpiresAt) > grace/2, "kept about the grace from now: until %s", o.Hold.ExpiresAt)
		require.True(t, o.Hold.ExpiresAt.After(ownExpiry), "kept past its own expiry: %s, own %s", o.Hold.ExpiresAt, ownExpiry)
		return held.OrderID, o.Payment.PaymentIntentID, ownExpiry, o.Hold.ExpiresAt
	}
	status := func(orderID string) string {
		var o order
		require.Equal(t, http.StatusOK, do(http.MethodGet, "/v1/orders/"+orderID, "", &o))
		return o.Status
	}

	// Passed within the grace, after the hold's own expiry had gone by
	// (by more than the expiry worker's interval): ticketed.
	orderID, intent, ownExpiry, _ := challenged(0)
	require.Eventually(t, func() bool {
		return time.Now().After(ownExpiry.Add(1500 * time.Millisecond))
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, "pending_payment", status(orderID), "kept through its own expiry")
	require.Equal(t, http.StatusOK, do(http.MethodPost, "/v1/sandbox/payment-intents/"+intent+"/authorize", "", nil))
	require.Eventually(t, func() bool { return status(orderID) == "ticketed" }, 30*time.Second, 20*time.Millisecond)

	// Not passed within the grace: the hold expires with it, the order
	// fails and its intent is canceled; the challenge can no longer be
	// answered.
	orderID, intent, _, graceEnds := challenged(1)
	require.Eventually(t, func() bool { return status(orderID) == "failed" }, 30*time.Second, 50*time.Millisecond)
	require.False(t, time.Now().Before(graceEnds), "failed before the grace ended")
	require.Eventually(t, func() bool {
		return do(http.MethodPost, "/v1/sandbox/payment-intents/"+intent+"/authorize", "", nil) == http.StatusConflict
	}, 30*time.Second, 50*time.Millisecond, "the intent still takes authorizations")
	require.Equal(t, "failed", status(orderID))
}
