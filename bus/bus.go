// Package bus is the event bus: the JetStream streams every event crosses,
// how they are provisioned, and the connection every role uses. The relay is
// the only publisher to the TICKETING stream; consumers read it through the
// consumers package; poison and exhausted messages land in TICKETING_DLQ.
package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream names and subjects (DESIGN.md § Events).
const (
	// Stream carries every domain event on ticketing.<aggregate>.<event_type>.
	Stream = "TICKETING"
	// SubjectPrefix starts every subject of Stream.
	SubjectPrefix = "ticketing."
	// DLQStream keeps dead letters on dlq.ticketing.<consumer>, each with the
	// original message, the consumer, the reason and the delivery count.
	DLQStream = "TICKETING_DLQ"
	// DLQSubjectPrefix starts every subject of DLQStream.
	DLQSubjectPrefix = "dlq.ticketing."
)

// Config describes the streams. Provision applies it idempotently.
type Config struct {
	// Replicas of each stream: 1 in development, 3 in production (a
	// 3-node cluster). Defaults to 1.
	Replicas int
	// MaxAge is the replay horizon of Stream. Defaults to 7 days.
	MaxAge time.Duration
	// Duplicates is the window in which a republished event (same
	// Nats-Msg-Id) is dropped. It must exceed the relay's worst gap between
	// two publishes of one row: its claim lease plus its backoff. Defaults
	// to 15m.
	Duplicates time.Duration
	// DLQMaxAge is how long dead letters are kept. Defaults to 30 days.
	DLQMaxAge time.Duration
}

func (c Config) withDefaults() Config {
	c.Replicas = cmp.Or(c.Replicas, 1)
	c.MaxAge = cmp.Or(c.MaxAge, 7*24*time.Hour)
	c.Duplicates = cmp.Or(c.Duplicates, 15*time.Minute)
	c.DLQMaxAge = cmp.Or(c.DLQMaxAge, 30*24*time.Hour)
	return c
}

// Provision creates or updates both streams to match cfg. It is safe to
// call from every process at start-up, concurrently.
func Provision(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	cfg = cfg.withDefaults()
	streams := []jetstream.StreamConfig{{
		Name:        Stream,
		Description: "Boxoffice domain events, published only by the outbox relay.",
		Subjects:    []string{SubjectPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      cfg.MaxAge,
		Duplicates:  cfg.Duplicates,
		Replicas:    cfg.Replicas,
	}, {
		Name:        DLQStream,
		Description: "Dead letters: messages a consumer gave up on, with the reason.",
		Subjects:    []string{DLQSubjectPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      cfg.DLQMaxAge,
		Duplicates:  cfg.Duplicates,
		Replicas:    cfg.Replicas,
	}}
	for _, sc := range streams {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("provision stream %s: %w", sc.Name, err)
		}
	}
	return nil
}

// Connect opens a connection that keeps reconnecting for as long as the
// process lives, so a NATS outage pauses publishing and consuming instead of
// ending them. The first connection attempt also retries in the background.
func Connect(url, name string, logger *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("nats disconnected", "error", err.Error())
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { logger.Info("nats reconnected", "url", c.ConnectedUrlRedacted()) }),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to nats: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("open jetstream: %w", err)
	}
	return nc, js, nil
}

// EmbeddedConfig configures StartEmbedded.
type EmbeddedConfig struct {
	// StoreDir holds JetStream's files. Required.
	StoreDir string
	// Host to listen on. Defaults to 127.0.0.1.
	Host string
	// Port to listen on; -1 picks a free one. Defaults to -1.
	Port int
}

// StartEmbedded runs a JetStream-enabled NATS server inside this process,
// listening on a loopback port so the nats CLI can inspect it.
func StartEmbedded(cfg EmbeddedConfig) (*server.Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("embedded nats: StoreDir is required")
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "boxoffice-embedded",
		Host:       cmp.Or(cfg.Host, "127.0.0.1"),
		Port:       cmp.Or(cfg.Port, -1),
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("embedded nats: not ready after 10s")
	}
	return srv, nil
}
