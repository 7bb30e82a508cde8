package handlers_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/handlers"
	"boxoffice/testkit/dbtest"
)

// openStream opens the order's event stream; cancel closes it from the
// client side.
func (b *testBundle) openStream(t *testing.T, orderPath, tok string) (*http.Response, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.srv.URL+orderPath+"/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { res.Body.Close() })
	return res, cancel
}

// requireRateLimited asserts res is the 429 rate-limited problem with a
// Retry-After of at least a second.
func requireRateLimited(t *testing.T, res response) {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, res.status, "%s", res.body)
	require.Equal(t, handlers.TypeRateLimited, problemType(t, res))
	secs, err := strconv.Atoi(res.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", res.header.Get("Retry-After"))
	require.GreaterOrEqual(t, secs, 1)
}

// streamResponse reads a refused stream's whole answer.
func streamResponse(t *testing.T, res *http.Response) response {
	t.Helper()
	var body []byte
	r := bufio.NewReader(res.Body)
	for {
		line, err := r.ReadBytes('\n')
		body = append(body, line...)
		if err != nil {
			break
		}
	}
	return response{status: res.StatusCode, header: res.Header, body: body}
}

func TestOrderStreamLimits(t *testing.T) {
	t.Parallel()

	type streamBundle struct {
		*testBundle
		reg *prometheus.Registry
	}
	setupStreams := func(t *testing.T, perOrder, perUser int) streamBundle {
		t.Helper()
		reg := prometheus.NewRegistry()
		b := setupPool(t, dbtest.New(t), func(c *handlers.Config) {
			c.Registerer = reg
			c.OrderStreamsPerOrder, c.OrderStreamsPerUser = perOrder, perUser
		})
		return streamBundle{b, reg}
	}
	// waitOpen waits until the process counts n open streams.
	waitOpen := func(t *testing.T, b streamBundle, n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			mfs, err := b.reg.Gather()
			if err != nil {
				return false
			}
			for _, mf := range mfs {
				if mf.GetName() == "boxoffice_order_streams_open" {
					return mf.GetMetric()[0].GetGauge().GetValue() == float64(n)
				}
			}
			return false
		}, 10*time.Second, 10*time.Millisecond, "waiting for %d open streams", n)
	}

	t.Run("PerOrderCapRefusesUntilAStreamCloses", func(t *testing.T) {
		t.Parallel()
		const perOrder = 4 // the default
		b := setupStreams(t, 0, 0)
		o := b.pendingOrder(t)
		cancels := make([]context.CancelFunc, perOrder)
		for i := range perOrder {
			res, cancel := b.openStream(t, o.path, o.owner)
			require.Equal(t, http.StatusOK, res.StatusCode)
			cancels[i] = cancel
		}
		waitOpen(t, b, perOrder)
		res, _ := b.openStream(t, o.path, o.owner)
		requireRateLimited(t, streamResponse(t, res))

		cancels[0]() // the client goes away
		waitOpen(t, b, perOrder-1)
		res, _ = b.openStream(t, o.path, o.owner)
		require.Equal(t, http.StatusOK, res.StatusCode, "a closed stream gives its slot back")
		require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	})

	t.Run("PerUserCapCountsEveryOrder", func(t *testing.T) {
		t.Parallel()
		b := setupStreams(t, 2, 3)
		o := b.pendingOrder(t)
		other := b.hold(t, o.owner, b.admit(t, o.owner, o.ev.ID), o.ev.ID, "k2", o.ev.Seats[5])
		require.Equal(t, http.StatusAccepted, other.status, "%s", other.body)
		otherPath := "/v1/orders/" + other.json(t)["orderId"].(string)

		for range 2 {
			res, _ := b.openStream(t, o.path, o.owner)
			require.Equal(t, http.StatusOK, res.StatusCode)
		}
		res, _ := b.openStream(t, o.path, o.owner)
		requireRateLimited(t, streamResponse(t, res)) // the order's cap
		res, _ = b.openStream(t, otherPath, o.owner)
		require.Equal(t, http.StatusOK, res.StatusCode)
		res, _ = b.openStream(t, otherPath, o.owner)
		requireRateLimited(t, streamResponse(t, res)) // the buyer's cap

		// Another buyer is not limited by the first one's streams.
		o2 := b.pendingOrder(t)
		res, _ = b.openStream(t, o2.path, o2.owner)
		require.Equal(t, http.StatusOK, res.StatusCode)
	})

	t.Run("StreamEndingAtFinalStatusReleasesItsSlot", func(t *testing.T) {
		t.Parallel()
		b := setupStreams(t, 1, 0)
		o := b.pendingOrder(t)
		res, _ := b.openStream(t, o.path, o.owner)
		require.Equal(t, http.StatusOK, res.StatusCode)
		refused, _ := b.openStream(t, o.path, o.owner)
		requireRateLimited(t, streamResponse(t, refused))

		require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, o.path+"/cancel", bearer(o.owner), nil).status)
		r := bufio.NewReader(res.Body)
		for {
			if _, err := nextSSE(t, r); err != nil {
				break // the server ended the stream
			}
		}
		waitOpen(t, b, 0)
		res, _ = b.openStream(t, o.path, o.owner)
		require.Equal(t, http.StatusOK, res.StatusCode)
	})
}

func TestHoldRateLimitPerBuyer(t *testing.T) {
	t.Parallel()
	b := setupPool(t, dbtest.New(t), func(c *handlers.Config) {
		c.HoldsPerSecond, c.HoldBurst = 1, 5 // a second's refill is far slower than the burst is sent
	})
	ev := b.createEvent(t, b.organizer(t))
	_, tok := b.buyer(t)
	adm := b.admit(t, tok, ev.ID)
	_, otherTok := b.buyer(t)
	otherAdm := b.admit(t, otherTok, ev.ID)

	const burst, sent = 5, 12
	res := make([]response, sent)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range sent {
		wg.Go(func() {
			<-start
			res[i] = b.hold(t, tok, adm, ev.ID, uuid.NewString(), ev.Seats[i])
		})
	}
	close(start)
	wg.Wait()
	var accepted, limited int
	for _, r := range res {
		switch r.status {
		case http.StatusAccepted:
			accepted++
		case http.StatusTooManyRequests:
			limited++
			requireRateLimited(t, r)
		default:
			t.Fatalf("unexpected %d: %s", r.status, r.body)
		}
	}
	// The refill during the burst may add a token; never more.
	require.GreaterOrEqual(t, accepted, burst)
	require.LessOrEqual(t, accepted, burst+1)
	require.Equal(t, sent, accepted+limited)
	// The refused holds wrote nothing: one order, hold and key per accepted one.
	counts := rowCounts(t, b.pool)
	require.EqualValues(t, accepted, counts["orders"])
	require.EqualValues(t, accepted, counts["holds"])
	require.EqualValues(t, accepted, counts["hold_seats"])
	require.EqualValues(t, accepted, counts["idempotency_keys"])

	// Every answer says the budget (IETF RateLimit draft headers): 5 holds,
	// refilled from empty in 5 s; the refused ones have none left.
	for _, r := range res {
		require.Equal(t, `"holds";q=5;w=5`, r.header.Get("RateLimit-Policy"), "%d", r.status)
		require.Regexp(t, `^"holds";r=[0-5];t=[0-5]$`, r.header.Get("RateLimit"))
		if r.status == http.StatusTooManyRequests {
			require.Regexp(t, `^"holds";r=0;t=[1-5]$`, r.header.Get("RateLimit"))
		}
	}

	// Another buyer has a bucket of its own: one hold taken, four left.
	other := b.hold(t, otherTok, otherAdm, ev.ID, uuid.NewString(), ev.Seats[50])
	require.Equal(t, http.StatusAccepted, other.status, "%s", other.body)
	require.Regexp(t, `^"holds";r=4;t=1$`, other.header.Get("RateLimit"))
}
