package roles

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/boxoffice/boxoffice/client"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"boxoffice/platform/auth"
	"boxoffice/platform/telemetry"
	"boxoffice/testkit/dbtest"
)

// otlpReceiver is an OTLP/HTTP trace receiver: what a collector, Jaeger
// or Tempo receives, decoded from the protobuf the exporter sends.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource []*commonpb.KeyValue
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(req.Body)
		var export collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &export)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.ResourceSpans {
			r.resource = append(r.resource, rs.GetResource().GetAttributes()...)
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) all() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			if v := kv.Value.GetStringValue(); v != "" {
				return v
			}
			return kv.Value.String()
		}
	}
	return ""
}

// One purchase through `boxoffice dev` with tracing on exports, over OTLP,
// one connected trace from the buyer's hold request to the ticket and the
// organizer's webhook: the hold's server span, the relay's publish of
// each event, each consumer's process span, the provider's calls, the
// provider's webhook applied in the order's trace, the ticket's event, and
// the delivery attempt, whose request carries the trace as traceparent.
// Every span's parent is in the trace (nothing dangles), and no span,
// attribute, event or resource holds a token, secret or client secret.
//
// Not parallel: the tracer provider is the process's one.
func TestTracingFollowsOnePurchaseFromHoldToTicket(t *testing.T) {
	otlp := newOTLPReceiver(t)
	url := dbtest.NewURL(t)
	env := func(name string) string {
		return map[string]string{
			"DATABASE_URL": url, "HTTP_ADDR": "127.0.0.1:0", "OPS_ADDR": "127.0.0.1:0", "BOXOFFICE_LOG_LEVEL": "warn",
			"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.URL, "OTEL_BSP_SCHEDULE_DELAY": "100",
		}[name]
	}
	out := startDev(t, env)
	re := regexp.MustCompile(`API\s+(\S+)`)
	require.Eventually(t, func() bool { return re.MatchString(out.String()) }, 60*time.Second, 50*time.Millisecond, "dev printed: %s", out)
	require.True(t, telemetry.Enabled(), "OTEL_EXPORTER_OTLP_ENDPOINT turns tracing on")
	t.Cleanup(func() {
		if t.Failed() { // what was exported, to see where the trace broke
			for _, s := range otlp.all() {
				t.Logf("trace %x span %x parent %x %s %v", s.TraceId, s.SpanId, s.ParentSpanId, s.Name, s.Kind)
			}
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api, err := client.NewClientWithResponses(re.FindStringSubmatch(out.String())[1])
	require.NoError(t, err)
	org := uuid.New()
	orgTok, err := auth.Mint([]byte(DevJWTSecret), auth.Identity{UserID: uuid.New(), Role: auth.RoleOrganizer, OrganizerID: org}, time.Hour)
	require.NoError(t, err)
	buyerTok, err := auth.Mint([]byte(DevJWTSecret), auth.Identity{UserID: uuid.New(), Role: auth.RoleBuyer}, time.Hour)
	require.NoError(t, err)
	asOrg, asBuyer := client.WithBearer(orgTok), client.WithBearer(buyerTok)
	secrets := map[string]string{"organizer token": orgTok, "buyer token": buyerTok, "JWT secret": DevJWTSecret, "provider webhook secret": DevWebhookKey}

	// The organizer's receiver records the traceparent of each delivery.
	hooks := make(chan string, 16)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"order.paid"`) {
			hooks <- r.Header.Get("traceparent")
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()
	ep, err := api.CreateWebhookEndpointWithResponse(ctx, nil, client.CreateWebhookEndpointJSONRequestBody{URL: receiver.URL}, asOrg)
	require.NoError(t, err)
	require.NotNil(t, ep.JSON201, "status %d: %s", ep.StatusCode(), ep.Body)
	secrets["webhook endpoint secret"] = ep.JSON201.Secret

	ev, err := api.CreateEventWithResponse(ctx, nil, client.CreateEventJSONRequestBody{
		Name: "Traced", StartsAt: time.Now().Add(30 * 24 * time.Hour), Currency: "eur",
		Sections: []client.SectionInput{{Name: "Floor", Rows: 1, SeatsPerRow: 1, PriceMinor: 100}},
	}, asOrg)
	require.NoError(t, err)
	require.NotNil(t, ev.JSON201, "status %d: %s", ev.StatusCode(), ev.Body)
	eventID := uuid.MustParse(ev.JSON201.ID)
	seats, err := api.ListSeatsWithResponse(ctx, eventID, nil, asBuyer)
	require.NoError(t, err)
	require.NotNil(t, seats.JSON200)
	var admission string
	require.Eventually(t, func() bool {
		j, err := api.JoinWaitingRoomWithResponse(ctx, eventID, asBuyer)
		if err == nil && j.JSON200 != nil && j.JSON200.AdmissionToken != nil {
			admission = *j.JSON200.AdmissionToken
		}
		return admission != ""
	}, time.Minute, 100*time.Millisecond, "admitted")
	secrets["admission token"] = admission

	held, err := api.CreateHoldWithResponse(ctx, eventID, &client.CreateHoldParams{IdempotencyKey: uuid.NewString(), XAdmissionToken: admission},
		client.CreateHoldJSONRequestBody{SeatIds: []string{seats.JSON200.Seats[0].ID}}, asBuyer)
	require.NoError(t, err)
	require.NotNil(t, held.JSON202, "status %d: %s", held.StatusCode(), held.Body)
	orderID := uuid.MustParse(held.JSON202.OrderID)

	var intent string
	require.Eventually(t, func() bool {
		o, err := api.GetOrderWithResponse(ctx, orderID, asBuyer)
		if err != nil || o.JSON200 == nil || o.JSON200.Payment == nil || o.JSON200.Payment.PaymentIntentID == nil {
			return false
		}
		intent = *o.JSON200.Payment.PaymentIntentID
		if o.JSON200.Payment.ClientSecret != nil {
			secrets["client secret"] = *o.JSON200.Payment.ClientSecret
		}
		return true
	}, time.Minute, 50*time.Millisecond, "the order's PaymentIntent")
	pay, err := api.SandboxPaymentIntentWithResponse(ctx, intent, client.SandboxAuthorize, asBuyer)
	require.NoError(t, err)
	require.Less(t, pay.StatusCode(), 300, "sandbox authorize: %s", pay.Body)
	require.Eventually(t, func() bool {
		o, err := api.GetOrderWithResponse(ctx, orderID, asBuyer)
		if err != nil || o.JSON200 == nil || o.JSON200.Status != "ticketed" || len(o.JSON200.Tickets) != 1 {
			return false
		}
		if q := o.JSON200.Tickets[0].QrPayload; q != nil {
			secrets["ticket QR payload"] = *q
		}
		return true
	}, time.Minute, 50*time.Millisecond, "the ticket")
	var traceparent string
	select {
	case traceparent = <-hooks:
	case <-ctx.Done():
		t.Fatal("the organizer's order.paid webhook never came")
	}

	// The hold request's span roots the order's trace.
	var traceID []byte
	require.Eventually(t, func() bool {
		for _, s := range otlp.all() {
			if s.Name == "POST /v1/events/{eventId}/holds" && s.Kind == tracepb.Span_SPAN_KIND_SERVER {
				require.Equal(t, orderID.String(), attr(s, "boxoffice.order.id"), "the hold's span names its order")
				require.Equal(t, held.JSON202.HoldID, attr(s, "boxoffice.hold.id"), "and its hold")
				traceID = s.TraceId
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "the hold request's span")
	require.Regexp(t, "^00-"+hex.EncodeToString(traceID)+"-[0-9a-f]{16}-01$", traceparent, "the organizer's webhook request continues the order's trace")

	// Every step is in that one trace, and connected.
	want := map[string]func(s *tracepb.Span) bool{
		"relay publish of HoldCreated": func(s *tracepb.Span) bool {
			return s.Kind == tracepb.Span_SPAN_KIND_PRODUCER && strings.HasSuffix(s.Name, "ticketing.order.HoldCreated")
		},
		"payments consumer processes PaymentAuthorizationRequested": func(s *tracepb.Span) bool {
			return s.Name == "process PaymentAuthorizationRequested"
		},
		"provider creates the intent": func(s *tracepb.Span) bool { return s.Name == "sandbox create_intent" },
		"provider's webhook applied in the order's trace": func(s *tracepb.Span) bool {
			return s.Name == "apply payment_intent.amount_capturable_updated" && attr(s, "boxoffice.order.id") == orderID.String()
		},
		"provider captures": func(s *tracepb.Span) bool { return s.Name == "sandbox capture" },
		"ticket issued":     func(s *tracepb.Span) bool { return s.Name == "process TicketIssued" },
		"webhook delivery":  func(s *tracepb.Span) bool { return s.Name == "POST webhook order.paid" },
		"database statements": func(s *tracepb.Span) bool {
			return attr(s, "db.system.name") == "postgresql" || attr(s, "db.system") == "postgresql"
		},
	}
	var inTrace []*tracepb.Span
	require.Eventually(t, func() bool {
		inTrace = inTrace[:0]
		for _, s := range otlp.all() {
			if string(s.TraceId) == string(traceID) {
				inTrace = append(inTrace, s)
			}
		}
		for _, match := range want {
			if !slices.ContainsFunc(inTrace, match) {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "every step of the purchase in the hold's trace")
	ids := map[string]bool{}
	for _, s := range inTrace {
		ids[string(s.SpanId)] = true
	}
	// A span whose parent has not been exported yet (it ends later, a
	// batch's span after its messages') is waited for, not excused.
	require.Eventually(t, func() bool {
		for _, s := range otlp.all() {
			if string(s.TraceId) == string(traceID) {
				ids[string(s.SpanId)] = true
			}
		}
		for _, s := range inTrace {
			if len(s.ParentSpanId) > 0 && !ids[string(s.ParentSpanId)] {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "every span's parent in the trace")
	roots := 0
	for _, s := range inTrace {
		if len(s.ParentSpanId) == 0 {
			roots++
			require.Equal(t, "POST /v1/events/{eventId}/holds", s.Name, "the one root is the hold request")
		}
	}
	require.Equal(t, 1, roots)

	// No secret anywhere in what was exported.
	var exported strings.Builder
	for _, s := range otlp.all() {
		exported.WriteString(s.Name + "\n")
		for _, kv := range s.Attributes {
			exported.WriteString(kv.String() + "\n")
		}
		for _, e := range s.Events {
			exported.WriteString(e.String() + "\n")
		}
		for _, l := range s.Links {
			exported.WriteString(l.String() + "\n")
		}
	}
	otlp.mu.Lock()
	for _, kv := range otlp.resource {
		exported.WriteString(kv.String() + "\n")
	}
	otlp.mu.Unlock()
	for what, secret := range secrets {
		require.NotEmpty(t, secret, what)
		require.NotContains(t, exported.String(), secret, "the %s is in a span", what)
	}
}
