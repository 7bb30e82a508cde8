// Package record is the one writer of the payments table: each order's
// PaymentIntent as the provider last described it (intent id, client
// secret, status, amount). Everything that learns something about an
// intent records it here: the payment commands (domain/payments) when
// the provider answers a call, the purchase saga (domain/purchase) when
// it applies the provider's webhooks, and the payment ingress while an
// intent is being confirmed.
//
// It is a package of its own, below both domain/payments and
// domain/purchase, because domain/payments builds on the purchase saga
// (its ingress applies webhooks through it): the saga can ask this
// package, not domain/payments itself, without an import cycle. It owns
// no policy; it says how a row may change (an order keeps its first
// intent; a confirming status never overwrites a later one).
//
// Every function runs one statement on the caller's connection or
// transaction (pass db.Deferring(tx) to send a write with the commit), so
// asking here costs no round trip over writing the table in place.
package record

import (
	"context"

	"github.com/google/uuid"

	"boxoffice/platform/db"
	"boxoffice/sqlcgen"
)

// IntentParams is the intent the provider created for an order.
type IntentParams struct {
	OrderID uuid.UUID
	// Provider names who holds the intent: "stripe" or "sandbox".
	Provider        string
	PaymentIntentID string
	// ClientSecret lets the buyer's browser confirm the intent; it is
	// stored here and nowhere else.
	ClientSecret string
	Status       string
	AmountMinor  int64
	Currency     string
}

// Intent records the intent created for an order, with its client secret.
// It reports false, writing nothing, when the order's row names another
// intent already: the order keeps its first intent. An order that is not
// in the database is a foreign key violation (db.SQLState "23503").
func Intent(ctx context.Context, d db.DBTX, p IntentParams) (bool, error) {
	n, err := sqlcgen.New().PaymentUpsertIntent(ctx, d, sqlcgen.PaymentUpsertIntentParams{
		OrderID:         p.OrderID,
		Provider:        p.Provider,
		PaymentIntentID: p.PaymentIntentID,
		ClientSecret:    p.ClientSecret,
		Status:          p.Status,
		AmountMinor:     p.AmountMinor,
		Currency:        p.Currency,
	})
	return n > 0, err
}

// Status mirrors the provider's status of the order's intent. It reports
// false, writing nothing, when the order has no row for that intent.
func Status(ctx context.Context, d db.DBTX, orderID uuid.UUID, intentID, status string) (bool, error) {
	n, err := sqlcgen.New().PaymentSetStatus(ctx, d, sqlcgen.PaymentSetStatusParams{
		OrderID: orderID, PaymentIntentID: intentID, Status: status,
	})
	return n > 0, err
}

// MirrorStatus is Status for a writer that does not hold the order's
// lock (the payment commands, after a provider call): when another
// transaction is writing the row (the provider's webhook for the same
// intent, applied under the order's lock, which records what the provider
// says), it writes nothing rather than wait for it. It reports whether it
// wrote.
func MirrorStatus(ctx context.Context, d db.DBTX, orderID uuid.UUID, intentID, status string) (bool, error) {
	n, err := sqlcgen.New().PaymentMirrorStatus(ctx, d, sqlcgen.PaymentMirrorStatusParams{
		OrderID: orderID, PaymentIntentID: intentID, Status: status,
	})
	return n > 0, err
}

// ConfirmingStatus records a status of an intent being confirmed
// (requires_action, processing) unless the row moved on past
// confirmation: a late webhook never takes an authorized or captured
// intent back. It reports whether the row changed.
func ConfirmingStatus(ctx context.Context, d db.DBTX, orderID uuid.UUID, intentID, status string) (bool, error) {
	n, err := sqlcgen.New().PaymentRecordStatus(ctx, d, sqlcgen.PaymentRecordStatusParams{
		OrderID: orderID, PaymentIntentID: intentID, Status: status,
	})
	return n > 0, err
}

// ClearSecrets clears the client secret of up to maxRows payments whose
// order is in none of the statuses awaiting: nobody may confirm those
// intents any more, so nothing needs the secret. It returns how many it
// cleared; the retention worker calls it until fewer than maxRows come
// back.
func ClearSecrets(ctx context.Context, d db.DBTX, awaiting []string, maxRows int32) (int64, error) {
	return sqlcgen.New().RetentionClearClientSecrets(ctx, d, sqlcgen.RetentionClearClientSecretsParams{
		Awaiting: awaiting, MaxRows: maxRows,
	})
}
