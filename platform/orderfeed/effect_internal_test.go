package orderfeed

import (
	"testing"

	"github.com/stretchr/testify/require"

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
