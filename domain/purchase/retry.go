package purchase

import "time"

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
