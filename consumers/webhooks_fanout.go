package consumers

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"boxoffice/domain/webhooks"
	"boxoffice/platform/outbox"
)

// WebhooksFanOutName is the durable name of the webhooks fan-out consumer.
const WebhooksFanOutName = "webhooks_fanout"

// NewWebhooksFanOut returns the webhooks fan-out consumer: the consumer
// that turns the domain events that are public facts into webhook
// messages and their deliveries (webhooks.FanOut), a batch at a time. It
// is built with NewBatch: one read for the batch before any transaction
// (webhooks.FanOut.Plan), and when some event has a subscribed endpoint
// one transaction that records the inbox rows of those events and stores
// their messages and deliveries in one statement
// (webhooks.FanOutPlan.Store). An event no endpoint subscribes to
// (webhooks.ErrNothingToSend) is acked with no transaction and no inbox
// row (ErrNoEffect); webhooks.FanOut says why no endpoint that should get
// it can miss it.
//
// cfg.Name and cfg.FilterSubjects are set here (WebhooksFanOutName,
// webhooks.FanOutSubjects); MaxDeliver defaults to 50, since a payment
// failure waits for the saga; the other fields are as for New. In
// particular cfg.Bus is passed through: the fan-out reads that
// namespace's stream and dead-letters to its DLQ stream.
//
// It lives here with the other consumers; the mapping from events to
// messages stays in package webhooks, which does not import this one.
func NewWebhooksFanOut(pool *pgxpool.Pool, js jetstream.JetStream, cfg Config) (*Consumer, error) {
	cfg.Name = WebhooksFanOutName
	cfg.FilterSubjects = webhooks.FanOutSubjects
	if cfg.MaxDeliver == 0 {
		cfg.MaxDeliver = 50
	}
	if cfg.Logger == nil {
		return nil, errors.New("webhooks fan-out: Logger is required")
	}
	if pool == nil {
		return nil, errors.New("webhooks fan-out: pool is required")
	}
	fanOut := webhooks.NewFanOut(pool, cfg.Logger)
	return NewBatch(pool, js, cfg, func(ctx context.Context, evs []outbox.Envelope) (BatchPlan, error) {
		p, err := fanOut.Plan(ctx, evs)
		if err != nil {
			return BatchPlan{}, err
		}
		errs := make([]error, len(evs))
		for i := range evs {
			if errs[i] = p.Err(i); errors.Is(errs[i], webhooks.ErrNothingToSend) {
				errs[i] = ErrNoEffect
			}
		}
		return BatchPlan{Errs: errs, ApplyFunc: func(ctx context.Context, tx pgx.Tx, evs []outbox.Envelope) error {
			ids := make([]uuid.UUID, len(evs))
			for i, ev := range evs {
				ids[i] = ev.EventID
			}
			return p.Store(ctx, tx, ids)
		}}, nil
	})
}
