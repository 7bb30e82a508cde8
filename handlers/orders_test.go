package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/handlers"
)

func TestGetOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := b.createEvent(t, b.organizer(t))
	_, owner := b.buyer(t)
	held := b.hold(t, owner, b.admit(t, owner, ev.ID), ev.ID, "k", ev.Seats[2], ev.Seats[0])
	require.Equal(t, http.StatusAccepted, held.status)
	path := held.header.Get("Location")

	t.Run("OwnerSeesIt", func(t *testing.T) {
		res := b.do(t, http.MethodGet, path, bearer(owner), nil)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		o := res.json(t)
		require.Equal(t, held.json(t)["orderId"], o["id"])
		require.Equal(t, ev.ID, o["eventId"])
		require.Equal(t, "pending_payment", o["status"])
		require.EqualValues(t, 10000, o["amountMinor"])
		require.Equal(t, "eur", o["currency"])
		hold := o["hold"].(map[string]any)
		require.Equal(t, held.json(t)["holdId"], hold["id"])
		require.Equal(t, "active", hold["status"])
		require.Equal(t, held.json(t)["expiresAt"], hold["expiresAt"])
		require.ElementsMatch(t, []any{ev.Seats[0], ev.Seats[2]}, hold["seatIds"])
		require.Nil(t, o["payment"])
		require.Empty(t, o["tickets"])
	})

	t.Run("AnyoneElseGets404", func(t *testing.T) {
		_, stranger := b.buyer(t)
		res := b.do(t, http.MethodGet, path, bearer(stranger), nil)
		require.Equal(t, http.StatusNotFound, res.status)
		require.Equal(t, handlers.TypeNotFound, problemType(t, res))
		// An organizer is no buyer: 403 on every buyer route.
		res = b.do(t, http.MethodGet, path, bearer(b.organizer(t)), nil)
		require.Equal(t, http.StatusForbidden, res.status)
		require.Equal(t, handlers.TypeForbidden, problemType(t, res))
		require.Equal(t, http.StatusUnauthorized, b.do(t, http.MethodGet, path, nil, nil).status)
		require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/v1/orders/"+uuid.NewString(), bearer(owner), nil).status)
	})
}

func TestOperationsEndpoints(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/healthz", "/readyz", "/openapi.json", "/openapi.yaml", "/docs"} {
		res := b.do(t, http.MethodGet, path, nil, nil)
		require.Equal(t, http.StatusOK, res.status, path)
	}
	spec := b.do(t, http.MethodGet, "/openapi.json", nil, nil).json(t)
	paths := spec["paths"].(map[string]any)
	for _, p := range []string{"/v1/events", "/v1/events/{eventId}", "/v1/events/{eventId}/seats",
		"/v1/events/{eventId}/waiting-room", "/v1/events/{eventId}/holds", "/v1/orders/{orderId}"} {
		require.Contains(t, paths, p)
	}
	res := b.do(t, http.MethodGet, "/healthz", map[string]string{"X-Correlation-Id": "journey-42"}, nil)
	require.Equal(t, "journey-42", res.header.Get("X-Correlation-Id"))
}

func TestReadinessGatesOnRequiredChecksOnly(t *testing.T) {
	t.Parallel()
	down := func(context.Context) error { return errors.New("down") }
	up := func(context.Context) error { return nil }
	cases := []struct {
		checks []handlers.Check
		status int
		body   map[string]any
	}{
		{[]handlers.Check{{Name: "database", Func: up, Required: true}, {Name: "nats", Func: down}},
			http.StatusOK, map[string]any{"database": "ok", "nats": "unavailable"}},
		{[]handlers.Check{{Name: "database", Func: down, Required: true}, {Name: "nats", Func: up}},
			http.StatusServiceUnavailable, map[string]any{"database": "unavailable", "nats": "ok"}},
	}
	for _, tc := range cases {
		h := handlers.New(handlers.Config{Cells: noCells(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Checks: tc.checks})
		rec := httptest.NewRecorder()
		h.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		require.Equal(t, tc.status, rec.Code)
		var body map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		require.Equal(t, tc.body, body["checks"])
		require.NotContains(t, body, "payments", "no provider configured, none reported")
	}
}

// /readyz names the sandbox, whose buyers pay themselves, so that a
// deployment running it is seen to; it stays ready all the same.
func TestReadinessReportsThePaymentProvider(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"sandbox", "stripe"} {
		h := handlers.New(handlers.Config{Cells: noCells(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Payments: provider})
		rec := httptest.NewRecorder()
		h.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		var body map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		require.Equal(t, provider, body["payments"])
		require.Equal(t, "ok", body["status"])
	}
}
