// This file owns the attempt: the HTTP client, one signed POST of a
// message to its endpoint, the signing keys it uses, and how a transport
// error or an answer is kept for the attempt's record.

package webhooks

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"boxoffice/platform/telemetry"
	"boxoffice/platform/text"
	"boxoffice/sqlcgen"
)

// maxStoredResponse is how much of an answer an attempt keeps.
const maxStoredResponse = 1024

// maxDrain is how much more of an answer is read so that the connection
// can be reused; a longer answer closes it.
const maxDrain = 64 << 10

// result is the outcome of one attempt, as recorded. It stays inside the
// package: it carries the delivery row as claimed, endpoint secret included.
type result struct {
	Delivery   sqlcgen.WebhookDeliveryClaimRow
	Number     int32
	Trigger    string
	StatusCode int
	Class      string
	verdict    verdict
	Latency    time.Duration
	Response   string
	retryAfter time.Duration
	At         time.Time
	probe      bool
	// sent says a request went out (whatever came back): false when the
	// attempt failed before sending, as one whose secret cannot sign.
	sent bool
}

// newClient is the HTTP client of every attempt: connections through the
// guard (no proxy from the environment, which would bypass it), keep-alive
// with enough idle connections for MaxInFlight, no redirects followed, no
// cookies, and the attempt timeout.
func newClient(cfg DispatcherConfig) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           cfg.Guard.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          cfg.MaxInFlight * 2,
		MaxIdleConnsPerHost:   cfg.MaxInFlight,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: cfg.Timeout,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       cfg.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// send makes one attempt and hands its outcome to the flusher.
func (d *Dispatcher) send(ctx context.Context, row sqlcgen.WebhookDeliveryClaimRow, probe bool) {
	r := d.attempt(ctx, row)
	r.probe = probe
	if r.verdict == verdictGone {
		d.mu.Lock()
		d.gone[row.EndpointID] = time.Now()
		d.mu.Unlock()
	}
	d.done(row, probe)
	defer d.freeSlot()
	if d.afterSendFunc != nil && d.afterSendFunc(&r) {
		return
	}
	d.results <- r
}

// attempt POSTs the message to the endpoint, signed with every live key.
func (d *Dispatcher) attempt(ctx context.Context, row sqlcgen.WebhookDeliveryClaimRow) result {
	r := result{Delivery: row, Number: row.Attempts + 1, Trigger: row.NextTrigger, At: time.Now()}
	if len(row.Payload) > d.cfg.MaxPayloadBytes {
		r.Class, r.verdict = ClassPayloadTooLarge, verdictTerminal
		return r
	}
	body, err := EncodeFor(int(row.PayloadVersion), row.Payload)
	if err != nil { // not a message this package stored (it stores JSON): never sent, no retry helps
		r.Class, r.verdict = ClassPayloadTooLarge, verdictTerminal
		r.Response = "the stored message does not decode"
		return r
	}
	id := MessageID(row.MessageID)
	ts := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, row.Url, bytes.NewReader(body))
	if err != nil {
		r.Class, r.verdict = ClassRefused, verdictTerminal
		r.Response = "invalid url"
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Boxoffice-Webhooks/1")
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	keys, err := d.signingKeys(ctx, row, ts)
	if err != nil {
		// Never sent unsigned, nor signed with the previous secret alone:
		// the attempt fails, counted by its class and in the signature
		// failures by reason, and the delivery goes on on its schedule (a
		// rotation, or restoring the key, can fix the secret).
		d.metrics.signatureFailures.WithLabelValues(secretReason(err)).Inc()
		r.Class, r.verdict = ClassSecretInvalid, verdictRetry
		r.Response = "the endpoint's signing secret cannot be used"
		return r
	}
	req.Header.Set(HeaderSignature, Sign(keys, id, ts, body))

	if row.TraceParent != nil {
		var span trace.Span
		req, span = d.startSpan(req, row, r)
		defer func() { endSpan(span, r) }()
	}

	start := time.Now()
	r.sent = true
	resp, err := d.client.Do(req)
	if err != nil {
		r.Latency = time.Since(start)
		r.Class, r.verdict = classify(0, err)
		r.Response = text.Storable(transportError(err), maxStoredResponse)
		return r
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxStoredResponse))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	_ = resp.Body.Close()
	r.Latency = time.Since(start)
	r.StatusCode = resp.StatusCode
	r.Response = text.Storable(string(answer), maxStoredResponse)
	r.Class, r.verdict = classify(resp.StatusCode, nil)
	r.retryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	return r
}

// signingKeys are the keys a message is signed with at ts: the current
// secret, and the previous one while its overlap lasts, both opened with
// the keyring. Returns a *SecretError when the current secret cannot be
// used; a previous secret that cannot is left out (the delivery is still
// signed, with the current one) and counted as previous_<reason>.
func (d *Dispatcher) signingKeys(ctx context.Context, row sqlcgen.WebhookDeliveryClaimRow, ts time.Time) ([]Key, error) {
	cur, err := d.cfg.Keys.openKey(row.EndpointID, row.Secret)
	if err != nil {
		return nil, err
	}
	keys := []Key{cur}
	if row.PreviousSecret != nil && row.PreviousSecretExpiresAt != nil && ts.Before(*row.PreviousSecretExpiresAt) {
		prev, err := d.cfg.Keys.openKey(row.EndpointID, *row.PreviousSecret)
		if err != nil {
			d.metrics.signatureFailures.WithLabelValues("previous_" + secretReason(err)).Inc()
			d.logger.DebugContext(ctx, "previous webhook secret cannot be used; signing with the current one only",
				"endpoint_id", row.EndpointID.String(), "reason", secretReason(err))
			return keys, nil
		}
		keys = append(keys, prev)
	}
	return keys, nil
}

// transportError describes a failed request without its URL, which may
// hold the organizer's credentials in its query.
func transportError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// startSpan starts the attempt's client span (tracing on), the child of
// the span that fanned the event out, so the delivery continues the
// order's trace, and puts it in the request's traceparent header for the
// organizer's receiver. The span names the endpoint's host, never its
// URL (a receiver's URL may carry its own token), and no header or body.
func (d *Dispatcher) startSpan(req *http.Request, row sqlcgen.WebhookDeliveryClaimRow, r result) (*http.Request, trace.Span) {
	ctx, span := telemetry.Tracer().Start(telemetry.Continue(req.Context(), *row.TraceParent), "POST webhook "+row.EventType,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			semconv.HTTPRequestMethodPost,
			semconv.ServerAddress(req.URL.Hostname()),
			semconv.URLScheme(req.URL.Scheme),
			attribute.String("boxoffice.webhook.msg_id", MessageID(row.MessageID)),
			attribute.String("boxoffice.webhook.delivery_id", row.ID.String()),
			attribute.String("boxoffice.webhook.endpoint_id", row.EndpointID.String()),
			attribute.Int64("boxoffice.webhook.attempt", int64(r.Number)),
			attribute.String("boxoffice.webhook.trigger", r.Trigger),
			telemetry.EventType.String(row.EventType),
		))
	if row.OrderID != nil {
		span.SetAttributes(telemetry.OrderID.String(row.OrderID.String()))
	}
	telemetry.Inject(ctx, req.Header)
	return req.WithContext(ctx), span
}

// endSpan ends an attempt's span with its outcome.
func endSpan(span trace.Span, r result) {
	if r.StatusCode != 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(r.StatusCode))
	}
	span.SetAttributes(attribute.String("boxoffice.webhook.class", r.Class))
	if r.Class != ClassNone {
		span.SetStatus(codes.Error, r.Class)
	}
	span.End()
}
