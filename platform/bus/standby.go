package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A standby region keeps its own copy of each cell's streams, made by
// JetStream itself: the standby's servers form their own JetStream domain,
// connect to the primary region's as a leafnode, and hold a mirror of the
// cell's TICKETING and TICKETING_DLQ streams in the primary's domain. The
// standby's servers pull the mirror; nothing in the primary region pushes
// it, so a dead primary costs only the messages that had not crossed yet.
//
// A mirror has the same sequence numbers as its origin and accepts no
// publishes. At failover PromoteStandby turns each mirror into an ordinary
// stream with the cell's subjects (nats-server 2.12 and later allow the
// mirror configuration to be removed by a stream update); from then on the
// standby's relay publishes to it and its consumers read it from the
// start, where each consumer's inbox makes the events it had already
// applied no-ops.

// ErrStandbyStream is Provision's answer for a stream that is a standby's
// mirror: roles that publish or consume must not start in a standby region
// before PromoteStandby; they keep retrying until it has run.
var ErrStandbyStream = errors.New("stream is a standby's mirror: promote it first (boxoffice failover promote)")

// ProvisionStandby creates, in the standby's JetStream (js), a mirror of
// each of cfg.Namespace's two streams in the JetStream domain
// upstreamDomain, reached over a leafnode connection. The mirrors keep
// cfg's MaxAge, DLQMaxAge and Replicas. A stream of that name that exists
// already is left as it is (a mirror being kept, or a stream promoted
// since), so it is safe to call twice or after a failover.
func ProvisionStandby(ctx context.Context, js jetstream.JetStream, cfg Config, upstreamDomain string) error {
	if upstreamDomain == "" {
		return errors.New("provision standby streams: the upstream JetStream domain is required")
	}
	cfg = cfg.withDefaults()
	ns := cfg.Namespace
	// mirror is the standby's copy of the upstream stream name, holding
	// what (for its description) for maxAge.
	mirror := func(name, what string, maxAge time.Duration) jetstream.StreamConfig {
		sc := cfg.stream(name, "Standby copy of cell "+ns.Cell()+"'s "+what+", mirrored from domain "+upstreamDomain+".", maxAge)
		sc.Mirror = &jetstream.StreamSource{Name: name, Domain: upstreamDomain}
		return sc
	}
	mirrors := []jetstream.StreamConfig{
		mirror(ns.Stream(), "events", cfg.MaxAge),
		mirror(ns.DLQStream(), "dead letters", cfg.DLQMaxAge),
	}
	for _, sc := range mirrors {
		_, err := js.CreateStream(ctx, sc)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("provision standby stream %s: %w", sc.Name, err)
		}
	}
	return nil
}

// PromoteStandby turns the standby's mirrors of cfg.Namespace's streams
// into the cell's ordinary streams, writable with the cell's subjects and
// cfg's settings (Provision's), keeping every message they hold at its
// sequence. It reports which streams it promoted; a stream that is no
// longer a mirror is left alone, so a second call promotes nothing. Once a
// stream is promoted it never pulls from the old primary again.
func PromoteStandby(ctx context.Context, js jetstream.JetStream, cfg Config) ([]string, error) {
	var promoted []string
	for _, name := range []string{cfg.Namespace.Stream(), cfg.Namespace.DLQStream()} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return promoted, fmt.Errorf("promote stream %s: %w", name, err)
		}
		if s.CachedInfo().Config.Mirror == nil {
			continue
		}
		promoted = append(promoted, name)
	}
	if len(promoted) == 0 {
		return nil, nil
	}
	// Provision writes each stream's whole configuration, without a
	// mirror: that update is the promotion.
	if err := provision(ctx, js, cfg, true); err != nil {
		return nil, fmt.Errorf("promote streams: %w", err)
	}
	return promoted, nil
}

// StreamCopy is the state of one stream of the standby's copy.
type StreamCopy struct {
	// Stream is the stream's name.
	Stream string `json:"stream"`
	// Mirror is true while the stream is a mirror (not yet promoted).
	Mirror bool `json:"mirror"`
	// LastSeq is the sequence of the last message the copy holds: the
	// origin's sequence of that message.
	LastSeq uint64 `json:"last_seq"`
	// Lag is how many messages the copy was behind its origin when the
	// standby's servers last heard from it; meaningless once promoted.
	Lag uint64 `json:"lag"`
	// Active is how long ago the standby last heard from the origin: a
	// growing value means the link is down, and Lag is then a lower bound.
	Active time.Duration `json:"active_ns"`
}

// StandbyCopies reads the state of the standby's copy of ns's two streams
// from the standby's JetStream.
func StandbyCopies(ctx context.Context, js jetstream.JetStream, ns Namespace) ([]StreamCopy, error) {
	var out []StreamCopy
	for _, name := range []string{ns.Stream(), ns.DLQStream()} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("read standby stream %s: %w", name, err)
		}
		info := s.CachedInfo()
		c := StreamCopy{Stream: name, LastSeq: info.State.LastSeq}
		if info.Config.Mirror != nil {
			c.Mirror = true
			if info.Mirror != nil {
				c.Lag, c.Active = info.Mirror.Lag, info.Mirror.Active
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// StandbyLeafDenied lists the subjects a standby region's leafnode link to
// the primary must carry in neither direction (server.RemoteLeafOpts
// DenyImports and DenyExports): every cell's events and dead letters. A
// leafnode shares the account's subjects, so without this a publish in
// the standby would be stored by the primary's stream too, and, once the
// standby is promoted, a primary that comes back would write into the
// standby's streams. The mirrors still cross: they pull through the
// primary domain's JetStream API, which stays allowed.
func StandbyLeafDenied() []string {
	return []string{SubjectPrefix + ">", DLQSubjectPrefix + ">", "cells.>"}
}
