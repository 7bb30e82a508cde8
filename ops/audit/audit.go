// Package audit checks Boxoffice's invariants against a live database and,
// when it is reachable, the event stream: the read-only report behind
// `boxoffice audit`, run by operators after an incident and by the stack
// test after killing processes mid-run.
//
// A check either holds or lists up to ten offending subjects and how many
// there are. Checks whose subjects may be legitimately in flight (an
// outbox row not yet relayed, a hold not yet swept, a capture not yet
// ticketed) only count subjects older than a threshold, so a healthy
// system under load passes. The audit never writes.
package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"boxoffice/platform/bus"
	"boxoffice/sqlcgen"
)

// Thresholds are how long a subject may be in flight before it counts as
// stuck, and which cell's streams to read. Zero values take the defaults.
type Thresholds struct {
	// Bus is the namespace whose streams the audit reads: its dead letters
	// and the consumers of its main stream. Defaults to the default
	// namespace (TICKETING and TICKETING_DLQ).
	Bus bus.Namespace
	// OutboxAge: an outbox row unpublished for longer. Defaults to 1m.
	OutboxAge time.Duration
	// HoldGrace: an active hold this long past its expiry. Defaults to 1m.
	HoldGrace time.Duration
	// CaptureGrace: a captured payment whose order is neither ticketed nor
	// refunded this long after its last change. Defaults to 5m.
	CaptureGrace time.Duration
	// DeliveryWait: a webhook delivery due this long ago and not attempted.
	// Defaults to 10m.
	DeliveryWait time.Duration
	// RefundGrace: a refund asked for (an order refunding, a refund of
	// selected tickets requested) and not confirmed by the provider this
	// long after. Defaults to 1h: the payments consumer retries a provider
	// outage for about a day, so a refund this old is an outage to look
	// at, or a command reconcile will send again.
	RefundGrace time.Duration
}

func (t Thresholds) withDefaults() Thresholds {
	t.OutboxAge = cmp.Or(t.OutboxAge, time.Minute)
	t.HoldGrace = cmp.Or(t.HoldGrace, time.Minute)
	t.CaptureGrace = cmp.Or(t.CaptureGrace, 5*time.Minute)
	t.DeliveryWait = cmp.Or(t.DeliveryWait, 10*time.Minute)
	t.RefundGrace = cmp.Or(t.RefundGrace, time.Hour)
	return t
}

// Check is the result of one invariant check.
type Check struct {
	// Name is stable, for scripts: e.g. "seat_two_active_holds".
	Name string
	// Description says what holds when the check passes.
	Description string
	// Count is how many subjects break it; 0 means it holds.
	Count int64
	// Samples are up to ten of them (ids, with detail where useful).
	Samples []string
}

// OK says whether the check holds.
func (c Check) OK() bool { return c.Count == 0 }

// Stream is what the audit learned from JetStream.
type Stream struct {
	// Name and DLQName are the namespace's main and dead-letter streams
	// (Thresholds.Bus), set whether or not they could be read.
	Name    string
	DLQName string
	// Reachable is false when no JetStream was given or it did not answer;
	// Error says why.
	Reachable bool
	Error     string
	// DeadLetters is the number of messages in the dead-letter stream. They
	// are not a broken invariant but each needs a person to look at it.
	DeadLetters uint64
	// Consumers are the durable consumers of the main stream.
	Consumers []Consumer
}

// Consumer is one durable consumer's backlog.
type Consumer struct {
	Name       string
	Pending    uint64 // not yet delivered
	AckPending int    // delivered, not yet acknowledged
}

// Report is the result of Run.
type Report struct {
	At     time.Time
	Checks []Check
	Stream Stream
}

// OK says whether every check holds.
func (r Report) OK() bool {
	for _, c := range r.Checks {
		if !c.OK() {
			return false
		}
	}
	return true
}

// Run runs every check against pool and, when js is not nil, reads the
// dead letters and consumer backlogs of th.Bus's streams. An error means a check
// could not run, not that one failed.
func Run(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, th Thresholds) (Report, error) {
	th = th.withDefaults()
	q := sqlcgen.New()
	r := Report{At: time.Now().UTC()}
	add := func(name, desc string, c Check, err error) error {
		if err != nil {
			return fmt.Errorf("audit %s: %w", name, err)
		}
		c.Name, c.Description = name, desc
		r.Checks = append(r.Checks, c)
		return nil
	}
	var errs []error
	keep := func(err error) { errs = append(errs, err) }

	c, err := found(q.AuditSeatsWithTwoActiveHolds(ctx, pool))
	keep(add("seat_two_active_holds", "no seat has two active holds", c, err))
	c, err = found(q.AuditSeatsWithTwoTickets(ctx, pool))
	keep(add("seat_two_tickets", "no seat has two tickets", c, err))
	c, err = found(q.AuditSeatsHeldAndTicketedElsewhere(ctx, pool))
	keep(add("seat_held_and_ticketed", "no seat is held by one order and ticketed to another", c, err))
	c, err = found(q.AuditTicketsWithoutCapture(ctx, pool))
	keep(add("ticket_without_capture", "every ticket's order has a captured payment", c, err))
	c, err = found(q.AuditCapturesWithoutTicketsOrRefund(ctx, pool, th.CaptureGrace))
	keep(add("capture_without_tickets_or_refund",
		fmt.Sprintf("every captured payment is ticketed or refunded within %s", th.CaptureGrace), c, err))
	c, err = found(q.AuditRefundsStuck(ctx, pool, th.RefundGrace))
	keep(add("refund_stuck", fmt.Sprintf("every refund asked for is confirmed by the provider within %s", th.RefundGrace), c, err))
	c, err = found(q.AuditConfirmedOrdersWithoutAuthorization(ctx, pool))
	keep(add("confirmed_without_authorization", "every confirmed order has an authorized or captured payment", c, err))
	c, err = found(q.AuditSeatsMispriced(ctx, pool))
	keep(add("seat_mispriced", "every seat is in a price category of its event, at that category's price", c, err))
	c, err = found(q.AuditBlockedSeatsOwned(ctx, pool))
	keep(add("seat_blocked_and_owned", "no blocked seat is held or ticketed", c, err))
	c, err = found(q.AuditWaitlistOfferSeats(ctx, pool))
	keep(add("waitlist_offer_seats", "every live waitlist offer reserves exactly its seats, and no other entry reserves any", c, err))
	c, err = found(q.AuditFreeSeatsDisagree(ctx, pool))
	keep(add("free_seats_agree", "best available's free seats are exactly the seats nobody holds, owns or blocks", c, err))
	c, err = found(q.AuditIssuedOrdersWithoutTickets(ctx, pool, th.CaptureGrace))
	keep(add("issued_order_without_tickets",
		fmt.Sprintf("every comp or box office order not voided owns its seats and is ticketed within %s", th.CaptureGrace), c, err))
	c, err = found(q.AuditStaleOutboxRows(ctx, pool, th.OutboxAge))
	keep(add("outbox_unpublished", fmt.Sprintf("no outbox row is unpublished for longer than %s", th.OutboxAge), c, err))
	c, err = found(q.AuditOverdueActiveHolds(ctx, pool, th.HoldGrace))
	keep(add("hold_overdue", fmt.Sprintf("no hold is still active %s past its expiry", th.HoldGrace), c, err))
	c, err = found(q.AuditStuckWebhookDeliveries(ctx, pool, th.DeliveryWait))
	keep(add("webhook_delivery_stuck",
		fmt.Sprintf("no webhook delivery to a healthy endpoint waits more than %s past its due time", th.DeliveryWait), c, err))
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	r.Stream = readStream(ctx, js, th.Bus)
	r.Stream.Name, r.Stream.DLQName = th.Bus.Stream(), th.Bus.DLQStream()
	return r, nil
}

// auditRow is the shape of every audit query's rows.
type auditRow = struct {
	Subject string
	Total   int64
}

// found turns the rows of an audit query into a Check.
func found[T ~auditRow](rows []T, err error) (Check, error) {
	var c Check
	for _, row := range rows {
		r := auditRow(row)
		c.Count = r.Total
		c.Samples = append(c.Samples, r.Subject)
	}
	return c, err
}

// readStream reads ns's dead letters and its consumers' backlogs; a stream
// that cannot be read is reported, not an error.
func readStream(ctx context.Context, js jetstream.JetStream, ns bus.Namespace) Stream {
	if js == nil {
		return Stream{Error: "no NATS_URL given"}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var s Stream
	dlq, err := js.Stream(ctx, ns.DLQStream())
	if err != nil {
		return Stream{Error: "read " + ns.DLQStream() + ": " + err.Error()}
	}
	info, err := dlq.Info(ctx)
	if err != nil {
		return Stream{Error: "read " + ns.DLQStream() + ": " + err.Error()}
	}
	s.DeadLetters = info.State.Msgs
	main, err := js.Stream(ctx, ns.Stream())
	if err != nil {
		return Stream{Error: "read " + ns.Stream() + ": " + err.Error()}
	}
	lister := main.ListConsumers(ctx)
	for ci := range lister.Info() {
		s.Consumers = append(s.Consumers, Consumer{Name: ci.Name, Pending: ci.NumPending, AckPending: ci.NumAckPending})
	}
	if err := lister.Err(); err != nil {
		return Stream{Error: "list consumers: " + err.Error()}
	}
	s.Reachable = true
	return s
}

// Write prints the report for people: one line per check, the offending
// subjects under a failed one, then the stream.
func (r Report) Write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Boxoffice invariant audit, %s\n\n", r.At.Format(time.RFC3339))
	failed := 0
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK() {
			mark = "FAIL"
			failed++
		}
		fmt.Fprintf(&b, "  %s  %-34s %s\n", mark, c.Name, c.Description)
		if !c.OK() {
			fmt.Fprintf(&b, "        %d found; first %d:\n", c.Count, len(c.Samples))
			for _, s := range c.Samples {
				fmt.Fprintf(&b, "          %s\n", s)
			}
		}
	}
	b.WriteString("\n")
	if !r.Stream.Reachable {
		fmt.Fprintf(&b, "  stream: not checked (%s)\n", r.Stream.Error)
	} else {
		fmt.Fprintf(&b, "  stream: %d dead letter(s) in %s\n", r.Stream.DeadLetters, cmp.Or(r.Stream.DLQName, bus.DLQStream))
		if len(r.Stream.Consumers) > 0 {
			fmt.Fprintf(&b, "  consumers of %s:\n", cmp.Or(r.Stream.Name, bus.Stream))
		}
		for _, c := range r.Stream.Consumers {
			fmt.Fprintf(&b, "    consumer %-20s %d pending, %d awaiting ack\n", c.Name, c.Pending, c.AckPending)
		}
	}
	b.WriteString("\n")
	if failed == 0 {
		fmt.Fprintf(&b, "All %d invariants hold.\n", len(r.Checks))
	} else {
		fmt.Fprintf(&b, "%d of %d invariants broken.\n", failed, len(r.Checks))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
