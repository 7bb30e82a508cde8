package consumers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"boxoffice/domain/tickets"
	"boxoffice/platform/bus"
	"boxoffice/platform/outbox"
)

// TicketsName is the durable name of the consumer that issues tickets:
// the name a TicketIssueRequested issued where the capture landed is
// written applied by (tickets.Issuer.IssuePaid), so this consumer acks it
// without a transaction.
const TicketsName = tickets.ConsumerName

// TicketsSubjects are the subjects the tickets consumer reads: only
// TicketIssueRequested.
var TicketsSubjects = bus.Subjects(outbox.AggregateOrder, outbox.TypeTicketIssueRequested)

// NewTickets returns the tickets consumer: for each TicketIssueRequested it
// runs issuer.Issue in the inbox transaction. cfg.Name and
// cfg.FilterSubjects are set here (TicketsName, TicketsSubjects); the
// other fields are as for New.
func NewTickets(pool *pgxpool.Pool, js jetstream.JetStream, cfg Config, issuer *tickets.Issuer) (*Consumer, error) {
	cfg.Name = TicketsName
	cfg.FilterSubjects = TicketsSubjects
	return New(pool, js, cfg, TicketsHandler(issuer))
}

// TicketsHandler is the HandlerFunc of the tickets consumer.
//
// An order not paid yet is a transient error, so the message comes back
// with backoff until the capture lands (it cannot come first in practice:
// the saga writes TicketIssueRequested in the transaction that marks the
// order paid). A payload that does not decode, an unknown order, or a
// seat ticketed to another order is permanent: the message is
// dead-lettered for a person to look at. Other event types are acked
// without effect.
func TicketsHandler(issuer *tickets.Issuer) HandlerFunc {
	return func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
		if ev.EventType != outbox.TypeTicketIssueRequested {
			return nil
		}
		var req outbox.TicketIssueRequested
		if err := json.Unmarshal(ev.Payload, &req); err != nil {
			return Permanent(errors.New("TicketIssueRequested payload does not decode"))
		}
		orderID := req.OrderID
		if orderID != ev.AggregateID {
			return Permanent(errors.New("TicketIssueRequested order_id differs from aggregate_id"))
		}
		_, err := issuer.Issue(ctx, tx, tickets.IssueParams{
			OrderID: orderID, CorrelationID: ev.CorrelationID, CausationID: ev.EventID.String(),
		})
		switch {
		case errors.Is(err, tickets.ErrOrderNotFound), errors.Is(err, tickets.ErrSeatTicketed):
			return Permanent(err)
		case err != nil:
			return fmt.Errorf("issue tickets: %w", err)
		}
		return nil
	}
}
