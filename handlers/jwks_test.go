package handlers_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/handlers"
	"boxoffice/platform/auth"
	"boxoffice/testkit/dbtest"
)

// A deployment that trusts only its identity provider's JWK Set, seen from
// the API: a buyer's ES256 token lists their orders; a token signed by a
// key the provider rotates in afterwards is accepted once the set is
// fetched again; and alg none, an HS256 token, a wrong issuer, a wrong
// audience and an expired token are each a 401 problem with
// WWW-Authenticate (every answer checked against openapi.yaml too).
func TestJWKSBearersOverHTTP(t *testing.T) {
	t.Parallel()
	const iss, aud = "https://idp.example.com/", "boxoffice-api"
	var mu sync.Mutex
	keys := map[string]crypto.Signer{}
	var published []byte
	publish := func(kids ...string) {
		store := jwkset.NewMemoryStorage()
		for _, kid := range kids {
			j, err := jwkset.NewJWKFromKey(keys[kid].Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid}})
			require.NoError(t, err)
			require.NoError(t, store.KeyWrite(context.Background(), j))
		}
		raw, err := store.JSONPublic(context.Background())
		require.NoError(t, err)
		mu.Lock()
		published = raw
		mu.Unlock()
	}
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(published)
	}))
	t.Cleanup(idp.Close)
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	keys["ec-1"], keys["ed-2"] = ec, ed
	publish("ec-1")

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b := setupPool(t, dbtest.New(t), func(cfg *handlers.Config) {
		v, err := auth.New(ctx, auth.VerifierConfig{JWKSURL: idp.URL, Issuer: iss, Audience: aud, Logger: cfg.Logger})
		require.NoError(t, err)
		cfg.Bearer = v
	})
	buyer := uuid.New()
	claims := func(mutate func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"sub": buyer.String(), "role": "buyer", "iss": iss, "aud": aud,
			"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
		if mutate != nil {
			mutate(c)
		}
		return c
	}
	sign := func(method jwt.SigningMethod, kid string, c jwt.MapClaims) string {
		tok := jwt.NewWithClaims(method, c)
		tok.Header["kid"] = kid
		s, err := tok.SignedString(keys[kid])
		require.NoError(t, err)
		return b.remember(s)
	}
	orders := func(token string) response {
		return b.do(t, http.MethodGet, "/v1/orders", bearer(token), nil)
	}

	require.Equal(t, http.StatusOK, orders(sign(jwt.SigningMethodES256, "ec-1", claims(nil))).status)

	// The provider rotates a new key in: the first token that names it
	// makes the API fetch the set again.
	publish("ec-1", "ed-2")
	require.Equal(t, http.StatusOK, orders(sign(jwt.SigningMethodEdDSA, "ed-2", claims(nil))).status)

	unsigned := func(c jwt.MapClaims) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodNone, c)
		tok.Header["kid"] = "ec-1"
		s, err := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
		require.NoError(t, err)
		return s
	}
	hs := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(nil))
		tok.Header["kid"] = "ec-1"
		s, err := tok.SignedString([]byte(base64.StdEncoding.EncodeToString(make([]byte, 32))))
		require.NoError(t, err)
		return s
	}
	for name, token := range map[string]string{
		"AlgNone":       unsigned(claims(nil)),
		"HS256":         hs(),
		"WrongIssuer":   sign(jwt.SigningMethodES256, "ec-1", claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.example.com/" })),
		"WrongAudience": sign(jwt.SigningMethodES256, "ec-1", claims(func(c jwt.MapClaims) { c["aud"] = "someone-else" })),
		"Expired":       sign(jwt.SigningMethodES256, "ec-1", claims(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() })),
	} {
		res := orders(token)
		require.Equal(t, http.StatusUnauthorized, res.status, "%s: %s", name, res.body)
		require.Contains(t, res.header.Get("WWW-Authenticate"), "Bearer", name)
		require.Equal(t, "/problems/unauthorized", problemType(t, res), name)
	}
}
