package onsale

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// client speaks the Boxoffice HTTP API to one base URL.
type client struct {
	base string
	http *http.Client
}

// response is what one API call answered. Problem is set for error
// statuses that carried application/problem+json.
type response struct {
	Status     int
	RetryAfter time.Duration
	Problem    problem
}

// problem is the part of an RFC 9457 problem the simulator acts on.
type problem struct {
	Type    string   `json:"type"`
	SeatIDs []string `json:"seatIds"`
}

// call sends a JSON request and decodes a 2xx JSON answer into out. It
// returns an error only when no HTTP answer arrived (timeouts, refused
// connections, a body that is not JSON); HTTP error statuses are in the
// response.
func (c *client) call(ctx context.Context, method, path, token string, headers map[string]string, body, out any) (response, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return response{}, fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return response{}, fmt.Errorf("request %s %s: %w", method, path, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", method, routeOf(path), err)
	}
	defer res.Body.Close()
	r := response{Status: res.StatusCode}
	if s := res.Header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			r.RetryAfter = time.Duration(n) * time.Second
		}
	}
	switch {
	case res.StatusCode < 300 && out != nil:
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			return r, fmt.Errorf("decode %s %s: %w", method, routeOf(path), err)
		}
	case res.StatusCode >= 400 && strings.Contains(res.Header.Get("Content-Type"), "json"):
		_ = json.NewDecoder(io.LimitReader(res.Body, 64<<10)).Decode(&r.Problem)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	return r, nil
}

// routeOf strips ids from a path so errors group by route.
func routeOf(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if len(p) >= 32 {
			parts[i] = "{id}"
		}
	}
	return strings.Join(parts, "/")
}
