package handlers

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/platform/admission"
	"boxoffice/platform/apikey"
	"boxoffice/platform/auth"
	"boxoffice/platform/db"
)

// APIKeyBody is an API key as listings show it: never the key.
type APIKeyBody struct {
	ID         uuid.UUID  `json:"id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix" doc:"The key's first characters (bo_live_ and 8 more), to tell keys apart. Not a secret." example:"bo_live_Zk3pQ1aB"`
	CreatedAt  time.Time  `json:"createdAt"`
	LastUsedAt *time.Time `json:"lastUsedAt,omitempty" doc:"When a request last presented the key, to the minute; absent if none has."`
	RevokedAt  *time.Time `json:"revokedAt,omitempty" doc:"When the key was revoked; absent while it is valid."`
}

func apiKeyBody(k apikey.Key) APIKeyBody {
	return APIKeyBody{
		ID: k.ID, Name: k.Name, Prefix: k.Prefix, CreatedAt: k.CreatedAt.UTC(),
		LastUsedAt: db.UTC(k.LastUsedAt), RevokedAt: db.UTC(k.RevokedAt),
	}
}

// APIKeySecretBody is a new key with the key itself: only the answer of
// create carries it, once.
type APIKeySecretBody struct {
	APIKeyBody
	Key string `json:"key" doc:"The API key. Shown only now: store it. Send it as Authorization: Bearer <key>."`
}

// CreateAPIKeyInput creates an API key.
type CreateAPIKeyInput struct {
	IdempotencyKeyHeader
	Body struct {
		Name string `json:"name" minLength:"1" maxLength:"100" example:"box office sync" doc:"What the key is for, to recognize it in listings."`
	}
}

// APIKeySecretOutput is a new key.
type APIKeySecretOutput struct {
	Location string `header:"Location"`
	Body     APIKeySecretBody
}

// ListAPIKeysOutput is the organizer's keys, oldest first.
type ListAPIKeysOutput struct {
	Body struct {
		APIKeys []APIKeyBody `json:"apiKeys"`
	}
}

// APIKeyPathInput names an API key.
type APIKeyPathInput struct {
	APIKeyID string `path:"apiKeyId" format:"uuid" doc:"API key id (UUID)."`
}

// AdmissionKeysOutput is the JWK Set admission tokens verify with.
type AdmissionKeysOutput struct {
	CacheControl string `header:"Cache-Control"`
	Body         admission.JWKS
}

func (h *Handlers) getAdmissionKeys(context.Context, *struct{}) (*AdmissionKeysOutput, error) {
	return &AdmissionKeysOutput{CacheControl: "public, max-age=300", Body: h.cfg.Admission.JWKS()}, nil
}

// apiKeys returns the API key store of the calling organizer's cell. An
// identity proved by an API key gets the 403 problem: keys are managed with
// the organizer's own bearer token, so a leaked key cannot mint more.
func (h *Handlers) apiKeys(ctx context.Context) (*apikey.Store, error) {
	if identity(ctx).APIKeyID != uuid.Nil {
		return nil, problem(http.StatusForbidden, TypeForbidden, "API keys are managed with an organizer's bearer token, not with an API key.")
	}
	c, err := h.organizerCell(ctx)
	if err != nil {
		return nil, err
	}
	if c.APIKeys == nil {
		return nil, problem(http.StatusNotFound, TypeNotFound, "API keys are not available on this server.")
	}
	return c.APIKeys, nil
}

func (h *Handlers) createAPIKey(ctx context.Context, in *CreateAPIKeyInput) (*APIKeySecretOutput, error) {
	store, err := h.apiKeys(ctx)
	if err != nil {
		return nil, err
	}
	c, err := h.organizerCell(ctx)
	if err != nil {
		return nil, err
	}
	body, _, err := idempotently(ctx, c, idempotentRequest{op: "create-api-key", key: in.IdempotencyKey, parts: []any{in.Body}, secret: true},
		func(ctx context.Context, tx pgx.Tx) (APIKeySecretBody, error) {
			k, key, err := store.CreateTx(ctx, tx, identity(ctx).OrganizerID, in.Body.Name)
			return APIKeySecretBody{APIKeyBody: apiKeyBody(k), Key: key}, err
		},
		func(ctx context.Context) (APIKeySecretBody, error) {
			k, key, err := store.Create(ctx, identity(ctx).OrganizerID, in.Body.Name)
			return APIKeySecretBody{APIKeyBody: apiKeyBody(k), Key: key}, err
		})
	if err != nil {
		return nil, h.problemFor(ctx, err, "create api key", "")
	}
	return &APIKeySecretOutput{Location: "/v1/api-keys/" + body.ID.String(), Body: body}, nil
}

func (h *Handlers) listAPIKeys(ctx context.Context, _ *struct{}) (*ListAPIKeysOutput, error) {
	store, err := h.apiKeys(ctx)
	if err != nil {
		return nil, err
	}
	ks, err := store.List(ctx, identity(ctx).OrganizerID)
	if err != nil {
		return nil, h.problemFor(ctx, err, "list api keys", "")
	}
	out := &ListAPIKeysOutput{}
	out.Body.APIKeys = make([]APIKeyBody, len(ks))
	for i, k := range ks {
		out.Body.APIKeys[i] = apiKeyBody(k)
	}
	return out, nil
}

func (h *Handlers) revokeAPIKey(ctx context.Context, in *APIKeyPathInput) (*struct{}, error) {
	store, err := h.apiKeys(ctx)
	if err != nil {
		return nil, err
	}
	id, err := parseUUID(in.APIKeyID, "path.apiKeyId")
	if err != nil {
		return nil, err
	}
	if _, err := store.Revoke(ctx, identity(ctx).OrganizerID, id); err != nil {
		return nil, h.problemFor(ctx, err, "revoke api key", "No such API key.")
	}
	return &struct{}{}, nil
}

// verifyAPIKey returns the identity an API key proves, read from the
// organizer's cell on every request (no cache, so a revocation holds for
// the next request). auth.ErrInvalidToken for a key that does not prove
// one; any other error means the cell could not answer.
func (h *Handlers) verifyAPIKey(ctx context.Context, key string) (auth.Identity, error) {
	org, ok := apikey.Organizer(key)
	if !ok {
		return auth.Identity{}, errors.Join(auth.ErrInvalidToken, errors.New("malformed api key"))
	}
	c, err := h.cells.ForOrganizer(ctx, org)
	if err != nil {
		return auth.Identity{}, err
	}
	if c.APIKeys == nil {
		return auth.Identity{}, errors.Join(auth.ErrInvalidToken, errors.New("api keys are not served"))
	}
	return c.APIKeys.Verify(ctx, key)
}
