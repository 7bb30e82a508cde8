// Package bus is the event bus: the JetStream streams every event crosses,
// how they are provisioned, and the connection every role uses. The relay is
// the only publisher to the TICKETING stream; consumers read it through the
// consumers package; poison and exhausted messages land in TICKETING_DLQ.
//
// Several purchase cells may share one JetStream cluster. Each cell has its
// own Namespace: its own pair of streams and its own subject prefix, so no
// cell sees another's events. The default namespace (the zero Namespace)
// keeps the names above, which a single-cell deployment uses.
package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"boxoffice/platform/sliceutil"
)

// Stream names and subjects (docs/design/outbox.md).
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

// Subject is the subject of Stream that the events of an aggregate and an
// event type go on: ticketing.<aggregate>.<event_type>. It is the one
// spelling of it: the outbox stores it with each row
// (outbox.Envelope.Subject), and each consumer names what it reads with
// it (Subjects).
func Subject(aggregate, eventType string) string {
	return SubjectPrefix + aggregate + "." + eventType
}

// Subjects is Subject of each of an aggregate's event types, in order.
func Subjects(aggregate string, eventTypes ...string) []string {
	return sliceutil.Map(eventTypes, func(t string) string { return Subject(aggregate, t) })
}

// How the consumer runtime's durable consumers keep their pull requests:
// each lives PullExpiry at the server, which sends an idle heartbeat every
// PullHeartbeat while it has nothing to deliver, and nats.go makes the
// pull again after two missed heartbeats. A pull request lives only on its
// consumer's leader: one made before the consumer had a leader, or held by
// a leader that stepped down (a node restarted, a cluster under load), is
// lost without a word. With nats.go's defaults (30 s, a heartbeat every
// 15 s) that left a consumer idle for 30 s: in the 20,000-buyer onsale on
// a 3-node cluster, no order got its PaymentIntent, or no ticket, for half
// a minute. (The order feed's ordered consumer keeps nats.go's own, a
// heartbeat every 5 s: a missed one recreates it.)
const (
	PullExpiry    = 10 * time.Second
	PullHeartbeat = time.Second
)

// defaultCell is the name of the cell whose namespace is the zero Namespace.
const defaultCell = "default"

// Namespace is one purchase cell's share of the bus: a stream for its events,
// a stream for its dead letters, and a subject prefix that no other
// namespace's subjects overlap. The zero value is the default namespace,
// whose names are the constants Stream, SubjectPrefix, DLQStream and
// DLQSubjectPrefix. Namespaces are comparable.
type Namespace struct {
	// cell is "" for the default namespace, else a ValidCellName other
	// than "default".
	cell string
}

// ForCell returns the namespace of the named cell. "" and "default" are the
// single-cell names used today and return the zero (default) Namespace.
// ForCell panics when cell is not a ValidCellName: a cell name comes from
// configuration, which must be validated with ValidCellName first.
func ForCell(cell string) Namespace {
	if cell == "" || cell == defaultCell {
		return Namespace{}
	}
	if !ValidCellName(cell) {
		panic(fmt.Sprintf("bus: invalid cell name %q", cell))
	}
	return Namespace{cell: cell}
}

// ValidCellName reports whether name can name a cell: 1–32 characters of
// [a-z0-9_-], starting with a letter or digit. Such a name cannot break a
// subject into extra tokens or add a wildcard, and stays within stream-name
// limits. "dlq" and names starting with "dlq_" are refused too, because
// their stream would take the name of a DLQ stream ("TICKETING_DLQ",
// "TICKETING_DLQ_<CELL>"). "default" is valid and names the default
// namespace.
func ValidCellName(name string) bool {
	if len(name) == 0 || len(name) > 32 {
		return false
	}
	if name == "dlq" || strings.HasPrefix(name, "dlq_") {
		return false
	}
	for i, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// Cell returns the name of n's cell: "default" for the zero value.
func (n Namespace) Cell() string {
	return cmp.Or(n.cell, defaultCell)
}

// Stream returns the name of n's event stream: Stream ("TICKETING") for the
// default namespace, "TICKETING_" + the upper-cased cell name otherwise
// (a "-" is kept: cell "eu-1" has "TICKETING_EU-1").
func (n Namespace) Stream() string {
	return n.streamName(Stream)
}

// SubjectPrefix starts every subject of n's Stream: SubjectPrefix
// ("ticketing.") for the default namespace, "cells.<cell>.ticketing."
// otherwise.
func (n Namespace) SubjectPrefix() string {
	return n.Subject(SubjectPrefix)
}

// Subject maps s, a subject or filter in default terms (as outbox rows store
// it, e.g. "ticketing.order.created", and as consumers.Config.FilterSubjects
// are written), into n: the identity for the default namespace,
// "cells.<cell>." + s otherwise. A subject outside the default streams maps
// to one outside n's streams, so JetStream still refuses it.
func (n Namespace) Subject(s string) string {
	if n.cell == "" {
		return s
	}
	return "cells." + n.cell + "." + s
}

// DLQStream returns the name of n's dead-letter stream: DLQStream
// ("TICKETING_DLQ") for the default namespace, "TICKETING_DLQ_" + the
// upper-cased cell name otherwise.
func (n Namespace) DLQStream() string {
	return n.streamName(DLQStream)
}

// streamName is the name of n's stream named base in the default
// namespace: base itself there, base + "_" + the upper-cased cell name
// otherwise.
func (n Namespace) streamName(base string) string {
	if n.cell == "" {
		return base
	}
	return base + "_" + strings.ToUpper(n.cell)
}

// DLQSubjectPrefix starts every subject of n's DLQStream: DLQSubjectPrefix
// ("dlq.ticketing.") for the default namespace,
// "cells.<cell>.dlq.ticketing." otherwise.
func (n Namespace) DLQSubjectPrefix() string {
	return n.Subject(DLQSubjectPrefix)
}

// Config describes the streams. Provision applies it idempotently.
type Config struct {
	// Namespace whose two streams Provision creates or updates. Defaults
	// to the default namespace (TICKETING and TICKETING_DLQ).
	Namespace Namespace
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

// Provision creates or updates both streams of cfg.Namespace to match cfg;
// the streams of other namespaces are left alone. It is safe to call from
// every process at start-up, concurrently.
//
// A stream that is a standby's mirror (ProvisionStandby) is not touched:
// Provision returns ErrStandbyStream until PromoteStandby has run, so a
// role started too early in a standby region waits instead of promoting
// the copy behind the operator's back.
func Provision(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	return provision(ctx, js, cfg, false)
}

// stream is what every stream of the cell's namespace is, in either
// region: name, kept on file by limits for maxAge, with c's Replicas.
// Provision adds its subjects, ProvisionStandby its mirror.
func (c Config) stream(name, description string, maxAge time.Duration) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        name,
		Description: description,
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      maxAge,
		Replicas:    c.Replicas,
	}
}

// provision is Provision; promote lets it update a mirror, which removes
// the mirror and so promotes it.
func provision(ctx context.Context, js jetstream.JetStream, cfg Config, promote bool) error {
	cfg = cfg.withDefaults()
	ns := cfg.Namespace
	stream := func(name, description, subjectPrefix string, maxAge time.Duration) jetstream.StreamConfig {
		sc := cfg.stream(name, description, maxAge)
		sc.Subjects, sc.Duplicates = []string{subjectPrefix + ">"}, cfg.Duplicates
		return sc
	}
	streams := []jetstream.StreamConfig{
		stream(ns.Stream(), "Boxoffice domain events of cell "+ns.Cell()+", published only by the outbox relay.",
			ns.SubjectPrefix(), cfg.MaxAge),
		stream(ns.DLQStream(), "Dead letters of cell "+ns.Cell()+": messages a consumer gave up on, with the reason.",
			ns.DLQSubjectPrefix(), cfg.DLQMaxAge),
	}
	for _, sc := range streams {
		if !promote {
			s, err := js.Stream(ctx, sc.Name)
			switch {
			case errors.Is(err, jetstream.ErrStreamNotFound):
			case err != nil:
				return fmt.Errorf("provision stream %s: %w", sc.Name, err)
			case s.CachedInfo().Config.Mirror != nil:
				return fmt.Errorf("provision stream %s: %w", sc.Name, ErrStandbyStream)
			}
		}
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("provision stream %s: %w", sc.Name, err)
		}
	}
	return nil
}

// Connect opens a connection that keeps reconnecting for as long as the
// process lives, so a NATS outage pauses publishing and consuming instead of
// ending them. The first connection attempt also retries in the background.
//
// Credentials come in url (nats://user:password@host:4222, for every
// server of the list) or as extra options (nats.UserCredentials for a
// .creds file). The URL is logged only redacted: a password never
// reaches the log.
func Connect(url, name string, logger *slog.Logger, extra ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	opts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("nats disconnected", "error", err.Error())
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { logger.Info("nats reconnected", "url", c.ConnectedUrlRedacted()) }),
		// Without a handler, nats.go writes asynchronous errors (a write
		// to a server that was killed, say) to stderr as plain text, which
		// breaks the process's JSON log.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			attrs := []any{"error", err.Error()}
			if sub != nil {
				attrs = append(attrs, "subject", sub.Subject)
			}
			logger.Warn("nats asynchronous error", attrs...)
		}),
	}, extra...)
	return Dial(url, opts...)
}

// Dial connects to url with exactly opts and opens JetStream on the
// connection; the connection is closed again when JetStream cannot be
// opened. Connect is Dial with the roles' reconnect-forever options; an
// operator command that must learn at once that a server does not answer
// dials with nats.NoReconnect.
func Dial(url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, opts...)
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
