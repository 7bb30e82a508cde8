// Package timeline tells one order's story: every fact the database keeps
// about it, in time order — the order and its hold, each event written
// for it (with its id and causation) and each consumer that applied it and
// when, its payment and declined attempts, the provider's webhooks
// (duplicates ignored included), its tickets and their check-ins, its
// refunds, and the webhook messages, deliveries and attempts to its
// event's organizer. `boxoffice timeline <orderId>` prints it and the
// organizer's API serves it (GET /v1/orders/{orderId}/timeline).
//
// It reads across the tables of several owners and writes nothing (the
// other domain packages own what it reads; cmd/boxoffice/layers_test.go
// lists it among the readers). No fact carries a secret: no client
// secret, QR payload, webhook body or response, endpoint URL or secret is
// read. The events come from outbox_history, which the statement writing
// each outbox row fills (platform/outbox), and the consumers from the
// inbox; both are bounded by retention (ops/retention,
// BOXOFFICE_INBOX_RETENTION), as are the provider's event ids
// (BOXOFFICE_STRIPE_EVENT_RETENTION) and the webhook messages
// (BOXOFFICE_WEBHOOK_RETENTION): an old order's story keeps what they
// still hold (docs/timeline.md).
package timeline

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"boxoffice/platform/db"
	"boxoffice/sqlcgen"
)

// ErrNotFound is returned for an order that does not exist, or, from
// ForOrganizer, that is not of the organizer's event.
var ErrNotFound = db.ErrNotFound

// Kinds of fact, the values of Fact.Kind.
const (
	KindOrderCreated      = "order.created"
	KindOrderStatus       = "order.status"
	KindHoldCreated       = "hold.created"
	KindEvent             = "event"
	KindEventApplied      = "event.applied"
	KindPaymentCreated    = "payment.created"
	KindPaymentStatus     = "payment.status"
	KindPaymentDeclined   = "payment.declined"
	KindProviderWebhook   = "provider.webhook"
	KindProviderDuplicate = "provider.webhook.duplicate"
	KindTicketIssued      = "ticket.issued"
	KindTicketRevoked     = "ticket.revoked"
	KindTicketCheckedIn   = "ticket.checked_in"
	KindRefundRequested   = "refund.requested"
	KindRefundSucceeded   = "refund.succeeded"
	KindWebhookMessage    = "webhook.message"
	KindWebhookDelivery   = "webhook.delivery"
	KindWebhookAttempt    = "webhook.attempt"
)

// Kinds lists every Fact.Kind.
var Kinds = []string{
	KindOrderCreated, KindOrderStatus, KindHoldCreated, KindEvent, KindEventApplied, KindPaymentCreated,
	KindPaymentStatus, KindPaymentDeclined, KindProviderWebhook, KindProviderDuplicate, KindTicketIssued,
	KindTicketRevoked, KindTicketCheckedIn, KindRefundRequested, KindRefundSucceeded, KindWebhookMessage,
	KindWebhookDelivery, KindWebhookAttempt,
}

// Fact is one line of an order's story.
type Fact struct {
	// At is when it happened, by the clock of whoever recorded it.
	At time.Time `json:"at"`
	// Kind says what it is (the Kind constants).
	Kind string `json:"kind"`
	// ID names its subject: the event's id for an event and its
	// applications, the provider's event id, the ticket's, refund's,
	// webhook message's or delivery's id; the order's or hold's.
	ID string `json:"id"`
	// Type is the event's type, the provider event's, the webhook
	// message's (order.paid), or a status (the order's, payment's,
	// delivery's).
	Type string `json:"type,omitempty"`
	// CausationID is what caused an event: the event it reacts to, or
	// the provider's event (stripe:evt_…).
	CausationID string `json:"causationId,omitempty"`
	// Consumer names the durable consumer that applied an event; for an
	// event its writer applied (Envelope.AppliedBy), the consumer it was
	// applied for.
	Consumer string `json:"consumer,omitempty"`
	// Count is the provider's deliveries ignored as duplicates, a
	// delivery's or decline's number.
	Count int `json:"count,omitempty"`
	// Detail is the rest, for people: amounts, seats, status codes.
	Detail string `json:"detail,omitempty"`
}

// Timeline is one order's story.
type Timeline struct {
	OrderID       uuid.UUID `json:"orderId"`
	EventID       uuid.UUID `json:"eventId"`
	Status        string    `json:"status"`
	CorrelationID string    `json:"correlationId"`
	// Facts are oldest first; facts of the same instant keep the order
	// in which they follow from each other (an order before its hold, an
	// event before its application).
	Facts []Fact `json:"facts"`
}

// Read returns the story of orderID from d (a pool, or a transaction for
// one snapshot), or ErrNotFound when there is no such order.
func Read(ctx context.Context, d db.DBTX, orderID uuid.UUID) (Timeline, error) {
	return read(ctx, d, orderID, nil)
}

// ForOrganizer is Read for the organizer of the order's event: an order of
// another organizer's event is ErrNotFound, as if it did not exist.
func ForOrganizer(ctx context.Context, d db.DBTX, organizerID, orderID uuid.UUID) (Timeline, error) {
	return read(ctx, d, orderID, &organizerID)
}

func read(ctx context.Context, d db.DBTX, orderID uuid.UUID, organizerID *uuid.UUID) (Timeline, error) {
	q, d := sqlcgen.New(), db.Interpreting(d)
	o, err := q.TimelineOrder(ctx, d, orderID)
	if err != nil {
		return Timeline{}, fmt.Errorf("read order: %w", err)
	}
	if organizerID != nil && *organizerID != o.OrganizerID {
		return Timeline{}, fmt.Errorf("read order: %w", ErrNotFound)
	}
	t := Timeline{OrderID: o.ID, EventID: o.EventID, Status: o.Status, CorrelationID: o.CorrelationID}
	add := func(f Fact) { t.Facts = append(t.Facts, f) }
	add(Fact{At: o.CreatedAt, Kind: KindOrderCreated, ID: o.ID.String(),
		Detail: fmt.Sprintf("%s %s", minor(o.AmountMinor), strings.ToUpper(o.Currency))})
	if o.HoldID != nil {
		add(Fact{At: deref(o.HoldCreatedAt), Kind: KindHoldCreated, ID: o.HoldID.String(), Type: deref(o.HoldStatus),
			Count: int(o.HoldSeats), Detail: holdDetail(o)})
	}

	evs, err := q.TimelineEvents(ctx, d, orderID)
	if err != nil {
		return Timeline{}, fmt.Errorf("read events: %w", err)
	}
	ids := make([]uuid.UUID, len(evs))
	keys := []string{"order.failed:" + orderID.String()}
	var providerIDs []string
	for i, e := range evs {
		ids[i] = e.EventID
		keys = append(keys, e.EventID.String())
		if id, ok := strings.CutPrefix(deref(e.CausationID), "stripe:"); ok {
			providerIDs = append(providerIDs, id)
		}
	}
	inbox, err := q.TimelineInbox(ctx, d, ids)
	if err != nil {
		return Timeline{}, fmt.Errorf("read inbox: %w", err)
	}
	applied := map[uuid.UUID][]sqlcgen.Inbox{}
	for _, r := range inbox {
		applied[r.EventID] = append(applied[r.EventID], r)
	}
	for _, e := range evs {
		f := Fact{At: e.OccurredAt, Kind: KindEvent, ID: e.EventID.String(), Type: e.EventType, CausationID: deref(e.CausationID)}
		add(f)
		if by := deref(e.AppliedBy); by != "" {
			add(Fact{At: e.OccurredAt, Kind: KindEventApplied, ID: f.ID, Type: e.EventType, Consumer: by,
				Detail: "applied by its writer, in the transaction that wrote it"})
		}
		for _, r := range applied[e.EventID] {
			add(Fact{At: r.ProcessedAt, Kind: KindEventApplied, ID: f.ID, Type: e.EventType, Consumer: r.Consumer})
		}
	}

	pays, err := q.TimelinePayment(ctx, d, orderID)
	if err != nil {
		return Timeline{}, fmt.Errorf("read payment: %w", err)
	}
	for _, p := range pays {
		id := cmp.Or(deref(p.PaymentIntentID), p.Provider)
		add(Fact{At: p.CreatedAt, Kind: KindPaymentCreated, ID: id, Type: p.Provider,
			Detail: fmt.Sprintf("%s %s", minor(p.AmountMinor), strings.ToUpper(p.Currency))})
		add(Fact{At: p.UpdatedAt, Kind: KindPaymentStatus, ID: id, Type: p.Status})
	}
	if o.PaymentDeclines > 0 {
		add(Fact{At: deref(o.LastDeclinedAt), Kind: KindPaymentDeclined, ID: o.ID.String(), Type: deref(o.LastDeclineCode),
			Count: int(o.PaymentDeclines), Detail: fmt.Sprintf("%d declined attempt(s); the last one's code", o.PaymentDeclines)})
	}

	webhooks, err := q.TimelineProviderEvents(ctx, d, sqlcgen.TimelineProviderEventsParams{OrderID: orderID, Ids: providerIDs})
	if err != nil {
		return Timeline{}, fmt.Errorf("read provider events: %w", err)
	}
	for _, w := range webhooks {
		// received_at is the recording transaction's start, which can
		// follow the occurred_at its writer gave the event the webhook
		// caused, by another clock: the webhook came first.
		at := w.ReceivedAt
		for _, e := range evs {
			if deref(e.CausationID) == "stripe:"+w.ID && e.OccurredAt.Before(at) {
				at = e.OccurredAt
			}
		}
		add(Fact{At: at, Kind: KindProviderWebhook, ID: w.ID, Type: w.Type})
		if w.Duplicates > 0 {
			add(Fact{At: deref(w.LastDuplicateAt), Kind: KindProviderDuplicate, ID: w.ID, Type: w.Type, Count: int(w.Duplicates),
				Detail: fmt.Sprintf("delivered again %d time(s), ignored (no second effect); the last at this time", w.Duplicates)})
		}
	}

	tickets, err := q.TimelineTickets(ctx, d, orderID)
	if err != nil {
		return Timeline{}, fmt.Errorf("read tickets: %w", err)
	}
	for _, tk := range tickets {
		add(Fact{At: ticketIssuedAt(tk.IssuedAt, evs), Kind: KindTicketIssued, ID: tk.ID.String(),
			Detail: fmt.Sprintf("seat %s, issued at %s", tk.SeatID, tk.IssuedAt.UTC().Format(time.RFC3339))})
		if tk.RevokedAt != nil {
			detail := "refunded; its seat stays off sale"
			if tk.ResaleAt != nil {
				detail = "refunded; its seat back on sale"
			}
			add(Fact{At: *tk.RevokedAt, Kind: KindTicketRevoked, ID: tk.ID.String(), Detail: detail})
		}
		if tk.CheckInScannedAt != nil {
			add(Fact{At: *tk.CheckInScannedAt, Kind: KindTicketCheckedIn, ID: tk.ID.String(), Detail: "gate " + deref(tk.CheckInGate)})
		}
	}

	refunds, err := q.TimelineRefunds(ctx, d, orderID)
	if err != nil {
		return Timeline{}, fmt.Errorf("read refunds: %w", err)
	}
	for _, r := range refunds {
		detail := fmt.Sprintf("%s %s for %d ticket(s)", minor(r.AmountMinor), strings.ToUpper(o.Currency), len(r.TicketIds))
		if r.Resell {
			detail += ", seats back on sale"
		}
		add(Fact{At: r.RequestedAt, Kind: KindRefundRequested, ID: r.ID.String(), Type: r.Status, Count: len(r.TicketIds), Detail: detail})
		if r.SucceededAt != nil {
			add(Fact{At: *r.SucceededAt, Kind: KindRefundSucceeded, ID: r.ID.String(), Detail: detail})
		}
	}

	if err := readWebhooks(ctx, q, d, o.OrganizerID, keys, add); err != nil {
		return Timeline{}, err
	}
	if o.UpdatedAt.After(o.CreatedAt) {
		add(Fact{At: o.UpdatedAt, Kind: KindOrderStatus, ID: o.ID.String(), Type: o.Status, Detail: "the order's status now"})
	}
	slices.SortStableFunc(t.Facts, func(a, b Fact) int { return cmp.Or(a.At.Compare(b.At), cmp.Compare(rank[a.Kind], rank[b.Kind])) })
	for i := range t.Facts {
		t.Facts[i].At = t.Facts[i].At.UTC()
	}
	return t, nil
}

// rank orders facts of the same instant as they follow from each other:
// an order before its hold, a provider's webhook before the event it
// caused, an event before its applications, and an application before
// what it wrote. Kinds not named keep the order read adds them in.
var rank = map[string]int{
	KindOrderCreated: -6, KindHoldCreated: -5, KindProviderWebhook: -4, KindEvent: -3, KindEventApplied: -2, KindPaymentCreated: -1,
}

// readWebhooks adds the organizer's webhook messages of the order (keys:
// what the fan-out keys them by), their deliveries and their attempts.
func readWebhooks(ctx context.Context, q *sqlcgen.Queries, d db.DBTX, organizerID uuid.UUID, keys []string, add func(Fact)) error {
	msgs, err := q.TimelineWebhookMessages(ctx, d, sqlcgen.TimelineWebhookMessagesParams{OrganizerID: organizerID, SourceKeys: keys})
	if err != nil {
		return fmt.Errorf("read webhook messages: %w", err)
	}
	if len(msgs) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(msgs))
	types := make(map[uuid.UUID]string, len(msgs))
	for i, m := range msgs {
		ids[i], types[m.ID] = m.ID, m.EventType
		add(Fact{At: m.CreatedAt, Kind: KindWebhookMessage, ID: m.ID.String(), Type: m.EventType})
	}
	deliveries, err := q.TimelineWebhookDeliveries(ctx, d, ids)
	if err != nil {
		return fmt.Errorf("read webhook deliveries: %w", err)
	}
	for _, dl := range deliveries {
		detail := fmt.Sprintf("%s to endpoint %s, status %s now", types[dl.MessageID], dl.EndpointID, dl.Status)
		add(Fact{At: dl.CreatedAt, Kind: KindWebhookDelivery, ID: dl.ID.String(), Type: dl.Status, Count: int(dl.Attempts), Detail: detail})
	}
	attempts, err := q.TimelineWebhookAttempts(ctx, d, ids)
	if err != nil {
		return fmt.Errorf("read webhook attempts: %w", err)
	}
	for _, a := range attempts {
		status := "no answer"
		if a.StatusCode != nil {
			status = fmt.Sprintf("HTTP %d", *a.StatusCode)
		}
		detail := fmt.Sprintf("%s attempt %d (%s) to endpoint %s: %s, %s, %d ms",
			types[a.MessageID], a.Number, a.Trigger, a.EndpointID, status, cmp.Or(a.ErrorClass, "ok"), a.LatencyMs)
		add(Fact{At: a.CreatedAt, Kind: KindWebhookAttempt, ID: a.DeliveryID.String(), Type: a.ErrorClass, Count: int(a.Number), Detail: detail})
	}
	return nil
}

// ticketIssuedAt places a ticket in its order's story. Its issued_at is
// to the second (its signed payload's), read before the ticket is written;
// the TicketIssued event written with it says when: the order's first
// TicketIssued event at or after issued_at (evs are oldest first). That
// event may fall in the next second (the issuer read its clock at x.98 s
// and wrote at x+1.01 s), so it is not looked for within issued_at's
// second only. Without such an event (outbox_history no longer keeps it)
// the ticket stands at its issued_at.
func ticketIssuedAt(issuedAt time.Time, evs []sqlcgen.TimelineEventsRow) time.Time {
	for _, e := range evs {
		if e.EventType == "TicketIssued" && !e.OccurredAt.Before(issuedAt) {
			return e.OccurredAt
		}
	}
	return issuedAt
}

// holdDetail describes the hold: seats and lifetime.
func holdDetail(o sqlcgen.TimelineOrderRow) string {
	s := fmt.Sprintf("%d seat(s) until %s", o.HoldSeats, deref(o.HoldExpiresAt).UTC().Format(time.RFC3339))
	if o.HoldPaymentGraceAt != nil {
		s += ", kept longer for a payment being confirmed"
	}
	return s
}

// minor formats an amount in minor units as major units (1234 → 12.34).
func minor(n int64) string {
	sign := ""
	if n < 0 {
		sign, n = "-", -n
	}
	return fmt.Sprintf("%s%d.%02d", sign, n/100, n%100)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// WriteText writes t for people: a header line, then one line per fact,
// oldest first: its time (UTC, to the microsecond), kind, id, and what
// else it has.
func (t Timeline) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "order %s  event %s  status %s  correlation %s\n", t.OrderID, t.EventID, t.Status, t.CorrelationID)
	for _, f := range t.Facts {
		fmt.Fprintf(&b, "%s  %-26s %s", f.At.UTC().Format("2006-01-02T15:04:05.000000Z"), f.Kind, f.ID)
		if f.Type != "" {
			fmt.Fprintf(&b, "  %s", f.Type)
		}
		if f.Consumer != "" {
			fmt.Fprintf(&b, "  consumer=%s", f.Consumer)
		}
		if f.CausationID != "" {
			fmt.Fprintf(&b, "  caused-by=%s", f.CausationID)
		}
		if f.Detail != "" {
			fmt.Fprintf(&b, "  (%s)", f.Detail)
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}
