package purchase

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/domain/payments/record"
	"boxoffice/platform/db"
	"boxoffice/sqlcgen"
)

// CodeCaptureFailed is the PaymentFailed code of an authorization whose
// capture the provider refused for good (payments.Commands writes it,
// run by the payments consumer). Any other code is a declined attempt to pay.
const CodeCaptureFailed = "capture_failed"

// DefaultPaymentAttempts is how many times a buyer may try to pay for an
// order when the event's onsale settings do not say: the decline that
// uses up the last attempt fails the order; the ones before leave it
// awaiting payment, with its hold, for the buyer to try again on the same
// PaymentIntent.
const DefaultPaymentAttempts = 3

// attemptsAllowed is the event's setting (0: none) or the default.
func attemptsAllowed(setting int32) int {
	if setting <= 0 {
		return DefaultPaymentAttempts
	}
	return int(setting)
}

// Decline is a payment attempt the card's issuer (or the buyer's bank, for
// 3-D Secure) refused.
type Decline struct {
	// Code is the provider's decline code (or error code when it gives no
	// decline code), e.g. insufficient_funds.
	Code string
	// Message says what happened in words a buyer may be shown: it never
	// tells a buyer that a card was reported lost, stolen or fraudulent.
	Message string
	At      time.Time
}

// DeclineMessage is the buyer-safe message of a decline code.
func DeclineMessage(code string) string {
	switch code {
	case "insufficient_funds":
		return "Your card has insufficient funds."
	case "expired_card":
		return "Your card has expired."
	case "incorrect_cvc", "invalid_cvc":
		return "Your card's security code is incorrect."
	case "incorrect_number", "invalid_number":
		return "Your card number is incorrect."
	case "processing_error":
		return "An error occurred while processing your card. Try again."
	case "authentication_required", "payment_intent_authentication_failure":
		return "Your bank could not authenticate this payment."
	default:
		// generic_decline, card_declined, do_not_honor, lost_card,
		// stolen_card, fraudulent, …: nothing more is for the buyer.
		return "Your card was declined."
	}
}

// DefaultPaymentGrace is how much longer a hold is kept, at most, when
// its PaymentIntent is being confirmed as it would expire.
const DefaultPaymentGrace = 5 * time.Minute

// GraceForPayment is what the payment ingress does when the provider says
// the order's intent is being confirmed (status requires_action, a 3-D
// Secure challenge; or processing, an asynchronous method): it records
// that status on the payments row and, once per hold, extends the order's
// active hold that still owns its seats so it lasts at least grace from
// now but never past its expiry plus grace. An authorization in flight is
// so not reclaimed under the buyer, and the grace cannot be renewed to
// keep the seats. It reports whether the hold was extended, and until
// when. It runs in the caller's transaction.
func GraceForPayment(ctx context.Context, tx pgx.Tx, orderID uuid.UUID, intentID, status string, grace time.Duration) (bool, time.Time, error) {
	q, tx := sqlcgen.New(), db.InterpretingTx(tx)
	if _, err := record.ConfirmingStatus(ctx, tx, orderID, intentID, status); err != nil {
		return false, time.Time{}, fmt.Errorf("record payment status: %w", err)
	}
	if grace <= 0 {
		return false, time.Time{}, nil
	}
	until, err := q.HoldGraceForPayment(ctx, tx, sqlcgen.HoldGraceForPaymentParams{OrderID: orderID, Grace: grace})
	switch {
	case errors.Is(err, db.ErrNotFound):
		return false, time.Time{}, nil // no active hold, graced before, or already past expiry
	case err != nil:
		return false, time.Time{}, fmt.Errorf("extend hold: %w", err)
	}
	return true, until, nil
}
