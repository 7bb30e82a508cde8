package handlers_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/handlers"
	"boxoffice/platform/admission"
	"boxoffice/platform/apikey"
	"boxoffice/platform/auth"
	"boxoffice/testkit/dbtest"
)

// setupAPIKeys is setup with the cell's API key store on the test's
// database.
func setupAPIKeys(t *testing.T) *testBundle {
	t.Helper()
	pool := dbtest.New(t)
	return setupPool(t, pool, func(cfg *handlers.Config) { cellOf(cfg).APIKeys = apikey.NewStore(pool) })
}

// createAPIKey creates a key named name with orgToken and returns its id
// and the key, remembered as a secret.
func (b *testBundle) createAPIKey(t *testing.T, orgToken, name string) (string, string) {
	t.Helper()
	res := b.do(t, http.MethodPost, "/v1/api-keys", bearer(orgToken), map[string]any{"name": name})
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	body := res.json(t)
	key := b.remember(body["key"].(string))
	require.Equal(t, "/v1/api-keys/"+body["id"].(string), res.header.Get("Location"))
	return body["id"].(string), key
}

func TestAPIKeys(t *testing.T) {
	t.Parallel()

	t.Run("ActsAsTheOrganizerUntilRevokedAndIsRefusedAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setupAPIKeys(t)
		org := uuid.New()
		orgToken := b.token(t, auth.Identity{UserID: uuid.New(), Role: auth.RoleOrganizer, OrganizerID: org})
		id, key := b.createAPIKey(t, orgToken, "box office sync")
		require.True(t, strings.HasPrefix(key, apikey.Prefix), key)

		// The key acts as the organizer: an event it creates is the
		// organizer's.
		ev := b.createEvent(t, key)
		res := b.do(t, http.MethodGet, "/v1/events", bearer(orgToken), nil)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		require.Contains(t, string(res.body), ev.ID)

		listed := b.do(t, http.MethodGet, "/v1/api-keys", bearer(orgToken), nil)
		require.Equal(t, http.StatusOK, listed.status, "%s", listed.body)
		require.NotContains(t, string(listed.body), key, "a listing never shows the key")
		keys := listed.json(t)["apiKeys"].([]any)
		require.Len(t, keys, 1)
		k := keys[0].(map[string]any)
		require.Equal(t, id, k["id"])
		require.Equal(t, key[:apikey.DisplayLen], k["prefix"])
		require.NotNil(t, k["lastUsedAt"], "the use was recorded")
		require.Nil(t, k["revokedAt"])

		res = b.do(t, http.MethodDelete, "/v1/api-keys/"+id, bearer(orgToken), nil)
		require.Equal(t, http.StatusNoContent, res.status, "%s", res.body)
		// The very next request with the key is refused.
		res = b.do(t, http.MethodGet, "/v1/events", bearer(key), nil)
		require.Equal(t, http.StatusUnauthorized, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeUnauthorized, problemType(t, res))

		// Revoking again succeeds; the key stays listed, revoked.
		res = b.do(t, http.MethodDelete, "/v1/api-keys/"+id, bearer(orgToken), nil)
		require.Equal(t, http.StatusNoContent, res.status, "%s", res.body)
		listed = b.do(t, http.MethodGet, "/v1/api-keys", bearer(orgToken), nil)
		require.NotNil(t, listed.json(t)["apiKeys"].([]any)[0].(map[string]any)["revokedAt"])
	})

	t.Run("IsNeverABuyer", func(t *testing.T) {
		t.Parallel()
		b := setupAPIKeys(t)
		orgToken := b.organizer(t)
		ev := b.createEvent(t, orgToken)
		_, key := b.createAPIKey(t, orgToken, "ci")
		res := b.do(t, http.MethodPost, "/v1/events/"+ev.ID+"/waiting-room", bearer(key), nil)
		require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
	})

	t.Run("RefusesAForgedOrMalformedKey", func(t *testing.T) {
		t.Parallel()
		b := setupAPIKeys(t)
		_, key := b.createAPIKey(t, b.organizer(t), "ci")
		last := key[len(key)-1]
		forged := key[:len(key)-1] + map[bool]string{true: "B", false: "A"}[last == 'A']
		for name, k := range map[string]string{"Forged": b.remember(forged), "Short": "bo_live_abc", "OtherPrefix": "bo_test_" + key[len(apikey.Prefix):]} {
			res := b.do(t, http.MethodGet, "/v1/events", bearer(k), nil)
			require.Equal(t, http.StatusUnauthorized, res.status, "%s: %s", name, res.body)
		}
	})

	t.Run("AreManagedWithABearerTokenOnlyAndPerOrganizer", func(t *testing.T) {
		t.Parallel()
		b := setupAPIKeys(t)
		orgToken := b.organizer(t)
		id, key := b.createAPIKey(t, orgToken, "ci")
		res := b.do(t, http.MethodPost, "/v1/api-keys", bearer(key), map[string]any{"name": "more"})
		require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
		res = b.do(t, http.MethodDelete, "/v1/api-keys/"+id, bearer(key), nil)
		require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)

		other := b.organizer(t)
		res = b.do(t, http.MethodDelete, "/v1/api-keys/"+id, bearer(other), nil)
		require.Equal(t, http.StatusNotFound, res.status, "%s", res.body)
		res = b.do(t, http.MethodGet, "/v1/api-keys", bearer(other), nil)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		require.Empty(t, res.json(t)["apiKeys"])
		_, buyerToken := b.buyer(t)
		res = b.do(t, http.MethodPost, "/v1/api-keys", bearer(buyerToken), map[string]any{"name": "mine"})
		require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
		// The key still works: nothing above touched it.
		res = b.do(t, http.MethodGet, "/v1/events", bearer(key), nil)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	})

	t.Run("AreLimitedPerOrganizer", func(t *testing.T) {
		t.Parallel()
		b := setupAPIKeys(t)
		orgToken := b.organizer(t)
		var first string
		for i := range apikey.MaxActive {
			id, _ := b.createAPIKey(t, orgToken, "key")
			if i == 0 {
				first = id
			}
		}
		res := b.do(t, http.MethodPost, "/v1/api-keys", bearer(orgToken), map[string]any{"name": "one too many"})
		require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeAPIKeyLimit, problemType(t, res))
		require.Equal(t, http.StatusNoContent, b.do(t, http.MethodDelete, "/v1/api-keys/"+first, bearer(orgToken), nil).status)
		b.createAPIKey(t, orgToken, "replacement")
	})
}

// An admission token the API issued verifies with a verifier built from
// nothing but the JWK Set the API serves publicly.
func TestAdmissionTokenVerifiesWithOnlyThePublicKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := b.createEvent(t, b.organizer(t))
	userID, buyerToken := b.buyer(t)
	tok := b.admit(t, buyerToken, ev.ID)

	res := b.do(t, http.MethodGet, "/v1/admission-keys", nil, nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Contains(t, res.header.Get("Cache-Control"), "public")
	require.NotContains(t, string(res.body), `"d"`)
	edge, err := admission.NewVerifierFromJWKS(res.body)
	require.NoError(t, err)
	c, err := edge.VerifyForRouting(tok, userID, uuid.MustParse(ev.ID))
	require.NoError(t, err)
	require.Equal(t, userID, c.UserID)
	require.WithinDuration(t, time.Now().Add(15*time.Minute), c.ExpiresAt, time.Minute)
}
