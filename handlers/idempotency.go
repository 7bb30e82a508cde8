package handlers

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"boxoffice/domain/cells"
	"boxoffice/platform/idempotency"
)

// IdempotencyKeyHeader is the Idempotency-Key of a creating POST other than
// a hold. It is optional, so that clients written before it keep working;
// a client that may retry sends one.
type IdempotencyKeyHeader struct {
	IdempotencyKey string `header:"Idempotency-Key" minLength:"1" maxLength:"255" doc:"Optional: a retry with the same key, for 24 hours, gets the first answer back (a secret it showed included) without doing it again, even while the first is still running; the same key with a different request is a 409 idempotency-conflict. Keys are per organizer."`
}

// idempotentRequest is an operation of the calling principal that may
// carry an Idempotency-Key.
type idempotentRequest struct {
	// op is the operation id.
	op string
	// key is the request's Idempotency-Key; empty, fn just runs.
	key string
	// parts are what the request asks (path parameters, the parsed
	// body): a retry must ask the same.
	parts []any
	// secret says the answer carries a secret shown once: it is stored
	// sealed with the cell's webhook secret keys.
	secret bool
}

// idempotently answers r: without a key by plain, every time, as before
// keys existed; with one by fn, run in a transaction of the cell c's
// database once per Idempotency-Key of the caller's organizer
// (idempotency.Do), so that a retry gets the first answer, replayed. fn and
// plain do the same thing, fn in the transaction it is given. The errors
// are theirs, or idempotency.Do's.
func idempotently[T any](ctx context.Context, c *cells.Cell, r idempotentRequest,
	fn func(ctx context.Context, tx pgx.Tx) (T, error), plain func(ctx context.Context) (T, error),
) (v T, replayed bool, err error) {
	if r.key == "" {
		v, err := plain(ctx)
		return v, false, err
	}
	if c.Pool == nil {
		return v, false, errors.New("idempotent request: the cell has no database pool")
	}
	hash, err := idempotency.Hash(r.op, r.parts...)
	if err != nil {
		return v, false, err
	}
	req := idempotency.Request{Principal: identity(ctx).OrganizerID, Key: r.key, Operation: r.op, Hash: hash}
	if r.secret {
		if c.Webhooks == nil {
			// Nothing to seal the secret with: never store it in clear.
			return v, false, errors.New("idempotent answer carries a secret and the cell has no webhook secret keys")
		}
		req.Sealer = c.Webhooks.Keyring()
	}
	return idempotency.Do(ctx, c.Pool, req, fn)
}
