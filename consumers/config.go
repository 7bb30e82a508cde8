package consumers

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/platform/bus"
)

// Config configures one durable consumer. New applies the defaults and
// validates the result.
type Config struct {
	// Name is the durable consumer's name, the inbox's consumer column and
	// the last token of its dead-letter subject. It must never change once
	// deployed: a new name is a new consumer that replays the stream.
	// Letters, digits, '-' and '_' only. Required.
	Name string
	// FilterSubjects are the subjects of the namespace's stream this
	// consumer reads, written in default terms (starting with
	// bus.SubjectPrefix, as outbox rows store them); they are mapped into
	// Bus with Bus.Subject when the JetStream consumer is created. Defaults
	// to every subject, bus.SubjectPrefix + ">".
	FilterSubjects []string
	// AckWait is how long JetStream waits for an ack before redelivering.
	// While a handler runs, the runtime tells JetStream it is still working
	// every AckWait/3, so AckWait bounds how long a crashed process holds a
	// message, not how long a handler may take. Defaults to 30s.
	AckWait time.Duration
	// MaxDeliver is how many deliveries a message gets: a failure on
	// delivery MaxDeliver dead-letters it. The JetStream consumer itself is
	// created with no limit, so that a message is never dropped while the
	// dead-letter stream cannot be written. Defaults to 10.
	MaxDeliver int
	// BackoffBase scales the delay before a failed message is redelivered:
	// BackoffBase·attempt⁴ ±10%. Defaults to 1s.
	BackoffBase time.Duration
	// BackoffMax caps that delay. Defaults to 10m.
	BackoffMax time.Duration
	// MaxAckPending bounds the messages delivered and not yet acked, across
	// every process running this consumer. Defaults to 1000.
	MaxAckPending int
	// Concurrency is how many batches this process handles at once, each
	// in its own transaction; with BatchSize it bounds how many messages it
	// buffers (Concurrency·BatchSize). Buffered messages get no progress
	// acks, so a batch that takes longer than AckWait/2 wants a larger
	// AckWait (a redelivery that races the first delivery is still applied
	// once: the inbox row serializes them). Defaults to 2: under load,
	// batches rather than parallel transactions carry the work (fewer,
	// fuller transactions; docs/performance.md), and at low load one free
	// worker is all a message needs.
	Concurrency int
	// BatchSize is the most messages one transaction applies. A worker
	// takes the message it waited for and whatever else is buffered, up to
	// BatchSize, without waiting for more: at low load a batch is one
	// message and nothing waits for a batch to fill; under load one
	// transaction, one inbox insert and one commit serve many messages.
	// A failing message never takes its batch down (see the package doc).
	// Defaults to the environment's BOXOFFICE_CONSUMER_BATCH_SIZE when set
	// (so an operator, or a test run, can change it for every consumer),
	// else DefaultBatchSize.
	BatchSize int
	// CallConcurrency bounds the external calls (NewExternal) this process
	// makes at once, across its batches: the batch's calls run
	// concurrently, and a provider such as Stripe rate-limits a burst.
	// Defaults to 16.
	CallConcurrency int
	// DoubleAck makes every ack wait for the server's confirmation
	// (jetstream.Msg.DoubleAck), for money-moving consumers that want to
	// know the ack landed. Defaults to false.
	DoubleAck bool
	// ShutdownTimeout bounds how long Run waits for in-flight handlers
	// after its context ends; then their contexts are canceled, their
	// transactions roll back and their messages are nakked for another
	// process. Defaults to 20s.
	ShutdownTimeout time.Duration
	// ProvisionTimeout bounds one attempt to create or update the durable
	// consumer; a failed attempt is retried with a growing delay. Defaults
	// to 30s.
	ProvisionTimeout time.Duration
	// Logger receives the consumer's logs. Required.
	Logger *slog.Logger
	// Registerer receives the consumer's metrics. Consumers sharing a
	// Registerer share the metric vectors, one label value each. Defaults
	// to none.
	Registerer prometheus.Registerer
	// Bus is the namespace the consumer reads: its durable consumer lives
	// on Bus.Stream() (durable names are per stream, so Name need not
	// change between namespaces) and its dead letters go to
	// Bus.DLQSubjectPrefix()+Name on Bus.DLQStream(). Defaults to the
	// default namespace (TICKETING and TICKETING_DLQ).
	Bus bus.Namespace
}

// DefaultBatchSize is Config.BatchSize's default, chosen by measurement
// (docs/performance.md): in bench purchases ticketed/s ÷ pgbench was 0.24
// at 4, 0.33 at 16 and 0.37 at 64, and in the 20,000-buyer onsale a
// batch of 64 halved paid → ticket (5.7 s → 2.9 s p50) against 16. A
// batch is only as large as the backlog, so at low load it changes
// nothing.
const DefaultBatchSize = 64

// BatchSizeEnv names the environment variable that, when set, overrides
// DefaultBatchSize for every consumer whose Config leaves BatchSize zero.
const BatchSizeEnv = "BOXOFFICE_CONSUMER_BATCH_SIZE"

// envBatchSize is BatchSizeEnv's value, DefaultBatchSize when it is unset,
// or -1 (refused by Validate) when it is not a positive integer.
func envBatchSize() int {
	v, ok := os.LookupEnv(BatchSizeEnv)
	if !ok || v == "" {
		return DefaultBatchSize
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return -1
	}
	return n
}

func (c Config) withDefaults() Config {
	if len(c.FilterSubjects) == 0 {
		c.FilterSubjects = []string{bus.SubjectPrefix + ">"}
	}
	c.AckWait = cmp.Or(c.AckWait, 30*time.Second)
	c.MaxDeliver = cmp.Or(c.MaxDeliver, 10)
	c.BackoffBase = cmp.Or(c.BackoffBase, time.Second)
	c.BackoffMax = cmp.Or(c.BackoffMax, 10*time.Minute)
	c.MaxAckPending = cmp.Or(c.MaxAckPending, 1000)
	c.Concurrency = cmp.Or(c.Concurrency, 2)
	c.BatchSize = cmp.Or(c.BatchSize, envBatchSize())
	c.CallConcurrency = cmp.Or(c.CallConcurrency, 16)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 20*time.Second)
	c.ProvisionTimeout = cmp.Or(c.ProvisionTimeout, 30*time.Second)
	return c
}

// Validate reports every invalid field of c, once defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("Name is required"))
	} else if strings.IndexFunc(c.Name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) >= 0 {
		errs = append(errs, fmt.Errorf("Name %q may hold only letters, digits, '-' and '_'", c.Name))
	}
	for _, s := range c.FilterSubjects {
		if !strings.HasPrefix(s, bus.SubjectPrefix) {
			errs = append(errs, fmt.Errorf("FilterSubjects: %q is not a subject of stream %s", s, bus.Stream))
		}
	}
	if c.AckWait < 10*time.Millisecond {
		errs = append(errs, errors.New("AckWait must be at least 10ms"))
	}
	if c.MaxDeliver < 1 {
		errs = append(errs, errors.New("MaxDeliver must be at least 1"))
	}
	if c.BackoffBase < 0 || c.BackoffMax < c.BackoffBase {
		errs = append(errs, errors.New("BackoffMax must be at least BackoffBase, and both positive"))
	}
	if c.Concurrency < 1 {
		errs = append(errs, errors.New("Concurrency must be at least 1"))
	}
	if c.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("BatchSize must be at least 1 (%s=%q)", BatchSizeEnv, os.Getenv(BatchSizeEnv)))
	}
	if c.CallConcurrency < 1 {
		errs = append(errs, errors.New("CallConcurrency must be at least 1"))
	}
	if c.MaxAckPending < c.Concurrency {
		errs = append(errs, errors.New("MaxAckPending must be at least Concurrency"))
	}
	if c.ShutdownTimeout < 0 {
		errs = append(errs, errors.New("ShutdownTimeout must not be negative"))
	}
	if c.ProvisionTimeout < 0 {
		errs = append(errs, errors.New("ProvisionTimeout must not be negative"))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("Logger is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("consumer config: %w", err)
	}
	return nil
}
