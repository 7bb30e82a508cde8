package orderfeed

import (
	"testing"

	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
	"boxoffice/platform/outbox"
)

// Every event type of the saga has the effect its writers give it; a type
// the feed does not know wakes the streams.
func TestEffectOf(t *testing.T) {
	t.Parallel()
	for typ, want := range map[string]effect{
		outbox.TypeHoldCreated:                   effectNone,
		outbox.TypePaymentAuthorizationRequested: effectNone,
		outbox.TypePaymentIntentCreated:          effectChanged,
		outbox.TypePaymentAuthorized:             effectNone,
		outbox.TypePaymentFailed:                 effectFollowUp,
		outbox.TypeOrderConfirmed:                effectChanged,
		outbox.TypeCaptureRequested:              effectNone,
		outbox.TypePaymentCaptured:               effectNone,
		outbox.TypeTicketIssueRequested:          effectChanged,
		outbox.TypeTicketIssued:                  effectChanged,
		outbox.TypeHoldExpired:                   effectChanged,
		outbox.TypeAuthorizationCancelRequested:  effectChanged,
		outbox.TypeAuthorizationCanceled:         effectNone,
		outbox.TypeRefundRequested:               effectChanged,
		outbox.TypePaymentRefunded:               effectFollowUp,
		outbox.TypeOrderCanceled:                 effectChanged,
		"OrderSomethingNew":                      effectChanged,
	} {
		require.Equal(t, want, effectOf(typ), typ)
	}
}

// The feed's consumer names, in its cell's namespace, every order event
// type it follows and no other, and every waitlist entry's event: the
// bus does not send an API process the events no stream shows.
func TestSubjects(t *testing.T) {
	t.Parallel()
	for _, ns := range []bus.Namespace{bus.ForCell("default"), bus.ForCell("b")} {
		var want []string
		for _, typ := range outbox.OrderTypes {
			if effectOf(typ) != effectNone {
				want = append(want, ns.Subject("ticketing.order."+typ))
			}
		}
		want = append(want, ns.Subject("ticketing.waitlist_entry.>"))
		require.Equal(t, want, subjects(ns))
		require.Len(t, want, 11, "ten of the sixteen order event types, and the waitlist's")
		require.NotContains(t, subjects(ns), ns.Subject("ticketing.order."+outbox.TypeHoldCreated))
		require.Contains(t, subjects(ns), ns.Subject("ticketing.order."+outbox.TypeOrderConfirmed))
	}
}
