package payments_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/domain/payments"
)

func TestIntentOmitsClientSecret(t *testing.T) {
	t.Parallel()
	const secret = "pi_1_secret_abcdef"
	in := payments.Intent{
		ID: "pi_1", ClientSecret: secret, Status: payments.StatusRequiresCapture,
		AmountMinor: 2500, Currency: "usd", AmountCapturable: 2500,
		Metadata: map[string]string{"order_id": "o1"}, Created: time.Unix(1_700_000_000, 0),
		LastPaymentError: &payments.PaymentError{Code: "card_declined"},
	}

	var text, js bytes.Buffer
	slog.New(slog.NewTextHandler(&text, nil)).Info("intent", "intent", in, "ptr", &in)
	slog.New(slog.NewJSONHandler(&js, nil)).Info("intent", "intent", in)
	marshaled, err := json.Marshal(in)
	require.NoError(t, err)

	for name, out := range map[string]string{
		"String": in.String(), "%v": fmt.Sprintf("%v", in), "%+v": fmt.Sprintf("%+v", in),
		"%#v": fmt.Sprintf("%#v", in), "%v of pointer": fmt.Sprintf("%v", &in), "%s": fmt.Sprintf("%s", in), //nolint:staticcheck // S1025: the test is what fmt's %s verb prints
		"slog text": text.String(), "slog json": js.String(), "json": string(marshaled),
	} {
		require.NotContains(t, out, "secret", name)
		require.Contains(t, out, "pi_1", name)
	}
	require.Contains(t, js.String(), `"intent":{"id":"pi_1","status":"requires_capture","amount_minor":2500,"currency":"usd","amount_capturable":2500,"amount_received":0,"order_id":"o1","last_payment_error":"card_declined"}`)
}

func TestIsRetryable(t *testing.T) {
	t.Parallel()
	transient := &payments.Error{Op: "capture", Code: payments.CodeNetwork, Retryable: true, Err: context.DeadlineExceeded}
	permanent := &payments.Error{Op: "capture", IntentID: "pi_1", Code: payments.CodeUnexpectedState, HTTPStatus: 400, Message: "canceled"}
	for _, tc := range []struct {
		name      string
		err       error
		retryable bool
		code      string
	}{
		{"Nil", nil, false, ""},
		{"Transient", transient, true, payments.CodeNetwork},
		{"Permanent", permanent, false, payments.CodeUnexpectedState},
		{"WrappedPermanent", fmt.Errorf("capture order: %w", permanent), false, payments.CodeUnexpectedState},
		{"WrappedTransient", fmt.Errorf("capture order: %w", transient), true, payments.CodeNetwork},
		{"NotAProviderError", errors.New("boom"), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.retryable, payments.IsRetryable(tc.err))
			require.Equal(t, tc.code, payments.ErrorCode(tc.err))
		})
	}
	require.ErrorIs(t, transient, context.DeadlineExceeded)
	require.Equal(t, "payments: capture pi_1: payment_intent_unexpected_state (400): canceled", permanent.Error())
}

// requireCode requires err to be a *payments.Error with code, retryable or
// not as said, and returns it.
func requireCode(t *testing.T, err error, code string, retryable bool) *payments.Error {
	t.Helper()
	var pe *payments.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, code, pe.Code, "error: %v", err)
	require.Equal(t, retryable, pe.Retryable, "error: %v", err)
	require.Equal(t, retryable, payments.IsRetryable(err))
	return pe
}
