package client

import (
	"encoding/json"
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
