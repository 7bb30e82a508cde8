// Package apiclient speaks the Boxoffice HTTP API as its own callers do:
// the onsale simulator's buyers, the benchmark's buyers, the stack test
// and the cells test. It sends JSON with a bearer token and any extra
// headers, decodes a 2xx JSON answer, and hands back the status, the
// headers, Retry-After and an RFC 9457 problem.
//
// It retries nothing and sets no timeout of its own: each caller keeps
// its own http.Client and its own retry loop. It imports the standard
// library only, so the production binary may use it.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// drainLimit bounds what is read of an answer beyond what is decoded, so
// the connection can be reused without reading an unbounded body.
const drainLimit = 64 << 10

// Client sends requests to one base URL. Its zero HTTP uses
// http.DefaultClient. A Client may be used by many goroutines at once.
type Client struct {
	// BaseURL is the API's root, without a trailing slash:
	// "http://127.0.0.1:8080".
	BaseURL string
	// HTTP sends the requests; its Timeout and Transport are the caller's.
	HTTP *http.Client
}

// Response is what one call answered.
type Response struct {
	// Status is the HTTP status code.
	Status int
	// Header is the answer's headers.
	Header http.Header
	// RetryAfter is the Retry-After header in whole seconds, or 0 when it
	// is absent or not a number of seconds.
	RetryAfter time.Duration
	// Problem is set for 4xx and 5xx answers whose body is JSON (the API
	// answers application/problem+json); otherwise it is zero.
	Problem Problem
}

// Problem is the RFC 9457 problem the API answers errors with, with the
// API's own extension (seatIds).
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// SeatIDs are the requested seats someone else holds or bought, on a
	// seat-unavailable conflict.
	SeatIDs []string `json:"seatIds"`
}

// Do sends method path to the API. body, when not nil, is encoded as JSON
// (a json.RawMessage goes as it is) with Content-Type application/json;
// bearer, when not empty, goes as "Authorization: Bearer …"; headers are
// set after both and so may override them. A 2xx answer is decoded into
// out when out is not nil; an empty 2xx body leaves out as it is.
//
// Do returns an error only when no HTTP answer arrived (a refused
// connection, a timeout) or when a 2xx answer did not decode into out;
// then the Response still carries the status. An HTTP error status is not
// an error: it is in the Response. Errors begin with the method and the
// route, ids replaced by {id}, and wrap the cause (a *url.Error, a
// context error), so errors.Is and errors.As see it.
func (c *Client) Do(ctx context.Context, method, path, bearer string, headers map[string]string, body, out any) (Response, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return Response{}, fmt.Errorf("encode %s %s: %w", method, Route(path), err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return Response{}, fmt.Errorf("request %s %s: %w", method, Route(path), err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return Response{}, fmt.Errorf("%s %s: %w", method, Route(path), err)
	}
	defer res.Body.Close()
	r := Response{Status: res.StatusCode, Header: res.Header}
	if s := res.Header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			r.RetryAfter = time.Duration(n) * time.Second
		}
	}
	switch {
	case res.StatusCode >= 200 && res.StatusCode < 300 && out != nil:
		if err := json.NewDecoder(res.Body).Decode(out); err != nil && !errors.Is(err, io.EOF) {
			return r, fmt.Errorf("decode %s %s: %w", method, Route(path), err)
		}
	case res.StatusCode >= 400 && strings.Contains(res.Header.Get("Content-Type"), "json"):
		_ = json.NewDecoder(io.LimitReader(res.Body, drainLimit)).Decode(&r.Problem)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, drainLimit))
	return r, nil
}

// Route is path with every segment of 32 characters or more (a UUID, a
// provider's id) replaced by {id}: "/v1/orders/{id}".
func Route(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if len(p) >= 32 {
			parts[i] = "{id}"
		}
	}
	return strings.Join(parts, "/")
}
