package consumers

import (
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"boxoffice/domain/webhooks"
)

// WebhooksFanOutName is the durable name of the webhooks fan-out consumer.
const WebhooksFanOutName = "webhooks_fanout"

// NewWebhooksFanOut returns the webhooks fan-out consumer: the consumer
// that turns the domain events that are public facts into webhook
// messages and their deliveries (webhooks.FanOutHandler, in the inbox
// transaction of each event). cfg.Name and cfg.FilterSubjects are set
// here (WebhooksFanOutName, webhooks.FanOutSubjects); MaxDeliver defaults
// to 50, since a payment failure waits for the saga; the other fields are
// as for New. In particular cfg.Bus is passed through: the fan-out reads
// that namespace's stream and dead-letters to its DLQ stream.
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
	return New(pool, js, cfg, webhooks.FanOutHandler(cfg.Logger))
}
