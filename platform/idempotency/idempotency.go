// Package idempotency makes a creating request safe to retry: the first
// request made with a principal's Idempotency-Key runs, and every later one
// with the same key and the same request is answered with the first one's
// answer, without running again. The same key with another request is
// ErrConflict. It is the one home of this rule for every operation but the
// hold, whose key lives in the hold's own single-statement transaction
// (purchase.Service.Hold) with the same semantics.
//
// The key's row is written in the request's own transaction, before its
// effect: a concurrent twin's insert waits on the row's unique index until
// the first request commits, then reads its answer (so concurrent retries
// are answered once), or finds the key free again if the first one failed
// (a key is bound only by a request that succeeded). A key is kept for
// Retention, then forgotten.
//
// It owns, as its one writer, the idempotent_requests table (the
// retention worker deletes expired rows).
package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/sqlcgen"
)

// Retention is how long a key answers its retries.
const Retention = 24 * time.Hour

// ErrConflict is returned when the key was already used by the principal
// for a different request (another operation, path or body). Nothing was
// run.
var ErrConflict = fault.New(fault.CodeConflict, "idempotency key reused with a different request")

// Sealer seals an answer that carries a secret before it is stored, and
// opens it again for a retry; webhooks.Keyring is one. Nothing carrying a
// secret is ever stored in clear.
type Sealer interface {
	Seal(id uuid.UUID, secret string) (string, error)
	Open(id uuid.UUID, stored string) (string, error)
}

// Request is one request made with an Idempotency-Key.
type Request struct {
	// Principal owns the key: keys of different principals never meet.
	Principal uuid.UUID
	// Key is the client's Idempotency-Key.
	Key string
	// Operation names what the request does (the operation id).
	Operation string
	// Hash identifies what the request asks (Hash): a retry must ask the
	// same.
	Hash []byte
	// Sealer, when not nil, seals the stored answer: set it for an
	// answer that carries a secret shown once.
	Sealer Sealer
}

// Hash is the hash of a request: its operation and its parts (path
// parameters and the parsed body), each as JSON.
func Hash(operation string, parts ...any) ([]byte, error) {
	sum := sha256.New()
	sum.Write([]byte(operation))
	for _, p := range parts {
		raw, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("hash idempotent request: %w", err)
		}
		sum.Write([]byte{0})
		sum.Write(raw)
	}
	return sum.Sum(nil), nil
}

// Do runs fn once for r: in a transaction on pool it claims r's key, runs
// fn in the same transaction, stores fn's answer (its JSON) under the key
// and commits. A retry of a request that succeeded gets that answer back,
// replayed true, and fn does not run; one that arrives while the first
// is still running waits for it. ErrConflict when the key was bound by a
// different request. When fn fails nothing is kept, the key included, and
// its error is returned as it is.
//
// fn must do all its writes in tx (services' Tx methods nest in it as a
// savepoint), so that the answer is stored if and only if its effect is.
func Do[T any](ctx context.Context, pool db.Executor, r Request, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (v T, replayed bool, err error) {
	type result struct {
		v        T
		replayed bool
	}
	q := sqlcgen.New()
	res, err := db.WithTxV(ctx, pool, func(ctx context.Context, tx pgx.Tx) (result, error) {
		_, err := q.IdempotentRequestClaim(ctx, tx, sqlcgen.IdempotentRequestClaimParams{
			Principal: r.Principal, Key: r.Key, Operation: r.Operation, RequestHash: r.Hash, Retention: Retention,
		})
		if errors.Is(err, db.ErrNotFound) {
			v, err := stored[T](ctx, tx, r)
			return result{v, true}, err
		} else if err != nil {
			return result{}, fmt.Errorf("claim idempotency key: %w", err)
		}
		v, err := fn(ctx, tx)
		if err != nil {
			return result{}, err
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return result{}, fmt.Errorf("encode idempotent answer: %w", err)
		}
		if r.Sealer != nil {
			sealed, err := r.Sealer.Seal(r.Principal, string(raw))
			if err != nil {
				return result{}, fmt.Errorf("seal idempotent answer: %w", err)
			}
			raw = []byte(sealed)
		}
		if err := q.IdempotentRequestComplete(ctx, tx, sqlcgen.IdempotentRequestCompleteParams{
			Response: raw, Sealed: r.Sealer != nil, Principal: r.Principal, Key: r.Key,
		}); err != nil {
			return result{}, fmt.Errorf("store idempotent answer: %w", err)
		}
		return result{v: v}, nil
	})
	return res.v, res.replayed, err
}

// stored is the answer of the request that bound r's key, or ErrConflict.
func stored[T any](ctx context.Context, tx pgx.Tx, r Request) (T, error) {
	var v T
	row, err := sqlcgen.New().IdempotentRequestGet(ctx, tx, sqlcgen.IdempotentRequestGetParams{Principal: r.Principal, Key: r.Key})
	if err != nil {
		// ErrNotFound too: the key expired between the claim and this read.
		return v, fmt.Errorf("read idempotency key: %w", err)
	}
	if row.Operation != r.Operation || !bytes.Equal(row.RequestHash, r.Hash) {
		return v, ErrConflict
	}
	raw := row.Response
	if row.Sealed {
		if r.Sealer == nil {
			return v, errors.New("read idempotency key: answer is sealed and no sealer was given")
		}
		opened, err := r.Sealer.Open(r.Principal, string(raw))
		if err != nil {
			return v, fmt.Errorf("open idempotent answer: %w", err)
		}
		raw = []byte(opened)
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("decode idempotent answer: %w", err)
	}
	return v, nil
}
