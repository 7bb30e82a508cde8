// Package dlq is the operator's dead-letter workflow: list the messages
// consumers gave up on, look at one, replay it to where it came from, or
// discard it, each action logged with who asked and why.
//
// A replay publishes the original message — its body and headers, so its
// event id — to its original subject on the cell's stream, under a fresh
// Nats-Msg-Id so that JetStream's duplicate window does not drop it.
// Every consumer whose subjects match receives it again; the inbox makes
// it a no-op for those that applied it before, so a replay of something
// already applied changes nothing. The dead letter is removed once the
// replay is stored.
package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/consumers"
	"boxoffice/platform/bus"
)

// Letter is one dead letter.
type Letter struct {
	// Seq is its sequence in the dead-letter stream: what show, replay
	// and discard take.
	Seq             uint64
	StoredAt        time.Time
	Consumer        string
	Reason          string
	NumDelivered    int
	OriginalSubject string
	OriginalSeq     uint64
	EventID         string
	// Data is the original message's body; Header its headers, the
	// dead-letter ones included.
	Data   []byte
	Header nats.Header
}

// Filter selects dead letters; zero fields select all.
type Filter struct {
	Consumer string
	// Reason keeps the letters whose reason contains it.
	Reason string
	// OlderThan keeps the letters stored at least this long ago.
	OlderThan time.Duration
}

// ErrNotFound is returned for a sequence that holds no dead letter.
var ErrNotFound = errors.New("no such dead letter")

// Queue is one cell's dead letters.
type Queue struct {
	js     jetstream.JetStream
	ns     bus.Namespace
	logger *slog.Logger
}

// New returns the dead letters of namespace ns, logging actions to logger.
func New(js jetstream.JetStream, ns bus.Namespace, logger *slog.Logger) *Queue {
	return &Queue{js: js, ns: ns, logger: logger.With("component", "dlq", "stream", ns.DLQStream())}
}

func (q *Queue) stream(ctx context.Context) (jetstream.Stream, error) {
	s, err := q.js.Stream(ctx, q.ns.DLQStream())
	if err != nil {
		return nil, fmt.Errorf("open dead-letter stream %s: %w", q.ns.DLQStream(), err)
	}
	return s, nil
}

// Get returns the dead letter at seq, or ErrNotFound.
func (q *Queue) Get(ctx context.Context, seq uint64) (Letter, error) {
	s, err := q.stream(ctx)
	if err != nil {
		return Letter{}, err
	}
	return q.get(ctx, s, seq)
}

func (q *Queue) get(ctx context.Context, s jetstream.Stream, seq uint64) (Letter, error) {
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Letter{}, ErrNotFound
	} else if err != nil {
		return Letter{}, fmt.Errorf("read dead letter %d: %w", seq, err)
	}
	l := Letter{
		Seq: m.Sequence, StoredAt: m.Time, Data: m.Data, Header: m.Header,
		Consumer:        m.Header.Get(consumers.HeaderConsumer),
		Reason:          m.Header.Get(consumers.HeaderReason),
		OriginalSubject: m.Header.Get(consumers.HeaderOriginalSubject),
		EventID:         m.Header.Get(consumers.HeaderEventID),
	}
	l.NumDelivered, _ = strconv.Atoi(m.Header.Get(consumers.HeaderNumDelivered))
	l.OriginalSeq, _ = strconv.ParseUint(m.Header.Get(consumers.HeaderOriginalSequence), 10, 64)
	return l, nil
}

// List returns the dead letters f selects, oldest first, as of now.
func (q *Queue) List(ctx context.Context, f Filter, now time.Time) ([]Letter, error) {
	s, err := q.stream(ctx)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read dead-letter stream: %w", err)
	}
	var out []Letter
	if info.State.Msgs == 0 {
		return out, nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		l, err := q.get(ctx, s, seq)
		if errors.Is(err, ErrNotFound) {
			continue // replayed or discarded
		} else if err != nil {
			return nil, err
		}
		switch {
		case f.Consumer != "" && l.Consumer != f.Consumer,
			f.Reason != "" && !strings.Contains(l.Reason, f.Reason),
			f.OlderThan > 0 && now.Sub(l.StoredAt) < f.OlderThan:
			continue
		}
		out = append(out, l)
	}
	return out, nil
}

// Replay publishes the dead letter at seq to its original subject, as it
// was (see the package documentation), and then removes it. who and why
// are logged; both are required.
func (q *Queue) Replay(ctx context.Context, seq uint64, who, why string) error {
	return q.act(ctx, "replay", "dead letter replayed", seq, who, why, func(s jetstream.Stream, l Letter) error {
		if !strings.HasPrefix(l.OriginalSubject, q.ns.SubjectPrefix()) {
			return fmt.Errorf("replay %d: its original subject %q is not on stream %s", seq, l.OriginalSubject, q.ns.Stream())
		}
		h := nats.Header{}
		for k, vs := range l.Header {
			if !strings.HasPrefix(k, "Boxoffice-") && !strings.HasPrefix(k, "Nats-") {
				h[k] = vs
			}
		}
		msg := &nats.Msg{Subject: l.OriginalSubject, Data: l.Data, Header: h}
		if _, err := q.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(q.ns.Stream()),
			jetstream.WithMsgID("dlq-replay:"+q.ns.DLQStream()+":"+strconv.FormatUint(seq, 10))); err != nil {
			return fmt.Errorf("replay %d: publish: %w", seq, err)
		}
		if err := s.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("replay %d: published, but the dead letter stays: %w", seq, err)
		}
		return nil
	})
}

// Discard removes the dead letter at seq without replaying it. who and why
// are logged; both are required.
func (q *Queue) Discard(ctx context.Context, seq uint64, who, why string) error {
	return q.act(ctx, "discard", "dead letter discarded", seq, who, why, func(s jetstream.Stream, _ Letter) error {
		if err := s.DeleteMsg(ctx, seq); err != nil {
			return fmt.Errorf("discard %d: %w", seq, err)
		}
		return nil
	})
}

// act is an operator's action on the dead letter at seq: it refuses to
// act unless who and why are both said, reads the letter (ErrNotFound when
// it is gone), runs do and, when do succeeds, logs done with the letter,
// who and why. Only an action that happened is logged.
func (q *Queue) act(ctx context.Context, action, done string, seq uint64, who, why string, do func(jetstream.Stream, Letter) error) error {
	if who == "" || why == "" {
		return errors.New(action + ": say who asks (-by) and why (-why)")
	}
	s, err := q.stream(ctx)
	if err != nil {
		return err
	}
	l, err := q.get(ctx, s, seq)
	if err != nil {
		return err
	}
	if err := do(s, l); err != nil {
		return err
	}
	q.logger.InfoContext(ctx, done, "seq", seq, "consumer", l.Consumer, "event_id", l.EventID,
		"subject", l.OriginalSubject, "by", who, "why", why)
	return nil
}

// Depth returns how many dead letters each consumer has.
func (q *Queue) Depth(ctx context.Context) (map[string]uint64, error) {
	s, err := q.stream(ctx)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(q.ns.DLQSubjectPrefix()+">"))
	if err != nil {
		return nil, fmt.Errorf("read dead-letter stream: %w", err)
	}
	out := make(map[string]uint64, len(info.State.Subjects))
	for subject, n := range info.State.Subjects {
		out[strings.TrimPrefix(subject, q.ns.DLQSubjectPrefix())] = n
	}
	return out, nil
}

// depthCollector is boxoffice_dead_letters, read from the stream at each
// scrape.
type depthCollector struct {
	q    *Queue
	desc *prometheus.Desc
}

// NewDepthCollector returns the collector of boxoffice_dead_letters{consumer}:
// the dead letters each consumer of q's cell has, read from the
// dead-letter stream when scraped (at most 2 s; nothing is reported when
// NATS does not answer).
func NewDepthCollector(q *Queue) prometheus.Collector {
	return &depthCollector{q: q, desc: prometheus.NewDesc("boxoffice_dead_letters",
		"Dead letters waiting on the cell's dead-letter stream, by consumer.", []string{"consumer"}, nil)}
}

func (c *depthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *depthCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	depth, err := c.q.Depth(ctx)
	if err != nil {
		return
	}
	for consumer, n := range depth {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), consumer)
	}
}
