package apiclient_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/testkit/apiclient"
)

const orderID = "0190b7c2-6a4e-7d2a-9f3b-5b1c2d3e4f50"

func server(t *testing.T) *apiclient.Client {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/echo", func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]string{
			"authorization": r.Header.Get("Authorization"), "contentType": r.Header.Get("Content-Type"),
			"key": r.Header.Get("Idempotency-Key"), "body": string(raw),
		})
	})
	mux.HandleFunc("POST /v1/holds", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusConflict)
		_, _ = io.WriteString(w, `{"type":"https://boxoffice.example/problems/seat-unavailable","title":"Seat unavailable","status":409,"seatIds":["s1"]}`)
	})
	mux.HandleFunc("GET /v1/empty", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	mux.HandleFunc("GET /v1/orders/{id}", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "not json") })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &apiclient.Client{BaseURL: srv.URL, HTTP: srv.Client()}
}

func TestDoSendsJSONWithBearerAndHeaders(t *testing.T) {
	c := server(t)
	var got map[string]string
	res, err := c.Do(context.Background(), http.MethodPost, "/v1/echo", "tok", map[string]string{"Idempotency-Key": "k1"}, map[string]any{"seatIds": []string{"a"}}, &got)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.Status)
	require.Equal(t, map[string]string{"authorization": "Bearer tok", "contentType": "application/json", "key": "k1", "body": `{"seatIds":["a"]}`}, got)

	// No bearer, no body: neither header; a raw JSON body goes as it is.
	_, err = c.Do(context.Background(), http.MethodPost, "/v1/echo", "", nil, nil, &got)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"authorization": "", "contentType": "", "key": "", "body": ""}, got)
	_, err = c.Do(context.Background(), http.MethodPost, "/v1/echo", "", nil, json.RawMessage(`{"a":1}`), &got)
	require.NoError(t, err)
	require.Equal(t, `{"a":1}`, got["body"])
}

func TestDoHandsBackProblemAndRetryAfter(t *testing.T) {
	c := server(t)
	var out struct{ OrderID string }
	res, err := c.Do(context.Background(), http.MethodPost, "/v1/holds", "tok", nil, map[string]any{}, &out)
	require.NoError(t, err, "an error status is not an error")
	require.Equal(t, http.StatusConflict, res.Status)
	require.Equal(t, 3*time.Second, res.RetryAfter)
	require.Equal(t, "3", res.Header.Get("Retry-After"))
	require.Equal(t, apiclient.Problem{Type: "https://boxoffice.example/problems/seat-unavailable", Title: "Seat unavailable", Status: 409, SeatIDs: []string{"s1"}}, res.Problem)
	require.Empty(t, out.OrderID, "an error answer is not decoded into out")
}

func TestDoErrors(t *testing.T) {
	c := server(t)
	var out struct{ Status string }
	res, err := c.Do(context.Background(), http.MethodGet, "/v1/empty", "", nil, nil, &out)
	require.NoError(t, err, "an empty 2xx body leaves out as it is")
	require.Equal(t, http.StatusAccepted, res.Status)

	res, err = c.Do(context.Background(), http.MethodGet, "/v1/orders/"+orderID, "", nil, nil, &out)
	require.ErrorContains(t, err, "decode GET /v1/orders/{id}")
	require.Equal(t, http.StatusOK, res.Status, "the status of an answer that did not decode")

	dead := &apiclient.Client{BaseURL: "http://127.0.0.1:1"}
	_, err = dead.Do(context.Background(), http.MethodGet, "/v1/orders/"+orderID, "", nil, nil, nil)
	require.ErrorContains(t, err, "GET /v1/orders/{id}: ")
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "the cause is wrapped")
}
