package orderfeed

import (
	"log/slog"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/outbox"
)

// A watcher is handed its order's events in the order delivered, and only
// its order's; one that may have missed some says so: more than
// maxPending waiting, or a change of the feed's health.
func TestWatcherTake(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*Feed, *Watcher, uuid.UUID) {
		t.Helper()
		f := New(Config{Logger: slog.New(slog.DiscardHandler)})
		order := uuid.New()
		w := f.Watch(order)
		t.Cleanup(w.Stop)
		return f, w, order
	}
	event := func(order uuid.UUID, typ string) Event {
		return Event{Envelope: outbox.Envelope{AggregateID: order, EventType: typ}}
	}
	signalled := func(w *Watcher) bool {
		select {
		case <-w.C:
			return true
		default:
			return false
		}
	}

	t.Run("DeliversItsOrdersEventsInOrder", func(t *testing.T) {
		t.Parallel()
		f, w, order := setup(t)
		f.deliver(event(order, outbox.TypeOrderConfirmed))
		f.deliver(event(uuid.New(), outbox.TypeOrderCanceled))
		f.deliver(event(order, outbox.TypeTicketIssueRequested))
		require.True(t, signalled(w))
		require.False(t, signalled(w), "one signal covers both")
		events, missed := w.Take()
		require.False(t, missed)
		require.Len(t, events, 2)
		require.Equal(t, outbox.TypeOrderConfirmed, events[0].Envelope.EventType)
		require.Equal(t, outbox.TypeTicketIssueRequested, events[1].Envelope.EventType)
		events, missed = w.Take()
		require.Empty(t, events)
		require.False(t, missed)
	})

	t.Run("TooManyWaitingIsMissed", func(t *testing.T) {
		t.Parallel()
		f, w, order := setup(t)
		for range maxPending + 1 {
			f.deliver(event(order, outbox.TypeOrderConfirmed))
		}
		events, missed := w.Take()
		require.Len(t, events, maxPending)
		require.True(t, missed)
	})

	t.Run("AHealthChangeIsMissed", func(t *testing.T) {
		t.Parallel()
		f, w, _ := setup(t)
		f.setHealthy(true)
		require.True(t, signalled(w))
		_, missed := w.Take()
		require.True(t, missed)
	})

	t.Run("AStoppedWatcherGetsNothing", func(t *testing.T) {
		t.Parallel()
		f, w, order := setup(t)
		w.Stop()
		w.Stop()
		f.deliver(event(order, outbox.TypeOrderConfirmed))
		require.False(t, signalled(w))
		require.Zero(t, f.Watching())
	})
}
