package webhooks

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Error classes of an attempt, as recorded and as the attempts metric's
// label: a small fixed set.
const (
	ClassNone            = "none"              // 2xx
	ClassTimeout         = "timeout"           // no answer within the timeout
	ClassConnection      = "connection"        // DNS, connect, TLS or transport failure
	ClassRefused         = "refused"           // the SSRF guard refused the address
	ClassRedirect        = "redirect"          // 3xx: redirects are not followed
	ClassHTTP408         = "http_408"          // request timeout
	ClassHTTP429         = "http_429"          // too many requests
	ClassHTTP5xx         = "http_5xx"          // server error
	ClassHTTP4xx         = "http_4xx"          // any other 4xx
	ClassGone            = "gone"              // 410: the endpoint is disabled
	ClassPayloadTooLarge = "payload_too_large" // never sent
	ClassSecretInvalid   = "secret_invalid"    // never sent: the endpoint's secret cannot sign
)

// verdict is what an attempt's outcome means for its delivery.
type verdict int

const (
	verdictSuccess  verdict = iota // succeeded
	verdictRetry                   // try again on the schedule
	verdictTerminal                // dead at once: no retry can fix it
	verdictGone                    // dead, and the endpoint disabled
	verdictReview                  // a terminal answer: needs review, not retried
)

// classify maps an attempt's response (status > 0) or transport error to
// an error class and a verdict: 2xx success; 408, 429, 5xx other than 501
// and 505, timeouts and connection errors retried; 410 gone; redirects,
// other 4xx, 501 (the receiver does not implement POST) and 505 (nor our
// HTTP version) terminal answers that need review; refused addresses
// terminal.
func classify(status int, err error) (string, verdict) {
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, ErrRefusedURL):
			return ClassRefused, verdictTerminal
		case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
			return ClassTimeout, verdictRetry
		}
		return ClassConnection, verdictRetry
	}
	switch {
	case status >= 200 && status < 300:
		return ClassNone, verdictSuccess
	case status == http.StatusRequestTimeout:
		return ClassHTTP408, verdictRetry
	case status == http.StatusTooManyRequests:
		return ClassHTTP429, verdictRetry
	case status == http.StatusNotImplemented, status == http.StatusHTTPVersionNotSupported:
		return ClassHTTP5xx, verdictReview
	case status >= 500:
		return ClassHTTP5xx, verdictRetry
	case status == http.StatusGone:
		return ClassGone, verdictGone
	case status >= 300 && status < 400:
		return ClassRedirect, verdictReview
	}
	return ClassHTTP4xx, verdictReview
}

// maxRetryAfter caps how far a Retry-After header may push a retry.
const maxRetryAfter = 24 * time.Hour

// retryAfter parses a Retry-After header: delay-seconds or an HTTP date.
// Returns 0 when absent or malformed.
func retryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return 0
	}
	if s, err := strconv.Atoi(h); err == nil && s >= 0 {
		return min(time.Duration(s)*time.Second, maxRetryAfter)
	}
	if t, err := http.ParseTime(h); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter)
	}
	return 0
}
