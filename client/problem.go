package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ProblemOf is the RFC 9457 problem of an error answer, whatever its
// status, for a caller of Client's methods (which return the
// *http.Response unread) or one that checks the status first: a
// response's ApplicationProblemJSONDefault is decoded for every status
// the operation does not document, which the server answers only with a
// problem. res is the answer (a response's HTTPResponse), body its bytes
// (Body). The problem is zero when res is not a 4xx or 5xx or its body is
// not JSON.
func ProblemOf(res *http.Response, body []byte) Problem {
	var p Problem
	if res != nil && res.StatusCode >= 400 && strings.Contains(res.Header.Get("Content-Type"), "json") {
		_ = json.Unmarshal(body, &p) // a body that is not a problem leaves p zero
	}
	return p
}

// RetryAfter is res's Retry-After in whole seconds (the API sends no
// dates), or 0 when res is nil or has none.
func RetryAfter(res *http.Response) time.Duration {
	if res == nil {
		return 0
	}
	n, err := strconv.Atoi(res.Header.Get("Retry-After"))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// StatusError is an answer with a status the caller did not want, as an
// error: the iterators (All*) return it for a page that is not a 200.
type StatusError struct {
	// StatusCode is the answer's HTTP status.
	StatusCode int
	// Problem is the answer's problem, zero when its body was none.
	Problem Problem
	// RetryAfter is the answer's Retry-After, 0 without one.
	RetryAfter time.Duration
}

// newStatusError is the StatusError of res, whose bytes are body.
func newStatusError(res *http.Response, body []byte) *StatusError {
	return &StatusError{StatusCode: res.StatusCode, Problem: ProblemOf(res, body), RetryAfter: RetryAfter(res)}
}

// Error is the status and, when there is one, the problem's type and
// detail.
func (e *StatusError) Error() string {
	s := "status " + strconv.Itoa(e.StatusCode)
	if e.Problem.Type != "" {
		s += ": " + e.Problem.Type
	}
	if e.Problem.Detail != "" {
		s += fmt.Sprintf(" (%s)", e.Problem.Detail)
	}
	return s
}
