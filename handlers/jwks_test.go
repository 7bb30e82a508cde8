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
// fetched again; a token issued a little ahead of our clock (within
// auth.ClockSkew) is accepted; and alg none, an HS256 token, a wrong
// issuer, a wrong audience, an expired token, a quoted exp and a token
// issued an hour from now are each a 401 problem with WWW-Authenticate
// (every answer checked against openapi.yaml too).
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

	// The provider's clock runs a little ahead of ours.
	require.Equal(t, http.StatusOK, orders(sign(jwt.SigningMethodES256, "ec-1", claims(func(c jwt.MapClaims) {
		c["iat"] = time.Now().Add(auth.ClockSkew / 2).Unix()
	}))).status)

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
		"StringExp":     sign(jwt.SigningMethodES256, "ec-1", claims(func(c jwt.MapClaims) { c["exp"] = "9999999999" })),
		"IssuedInAnHour": sign(jwt.SigningMethodES256, "ec-1", claims(func(c jwt.MapClaims) {
			c["iat"] = time.Now().Add(time.Hour).Unix()
		})),
	} {
		res := orders(token)
		require.Equal(t, http.StatusUnauthorized, res.status, "%s: %s", name, res.body)
		require.Contains(t, res.header.Get("WWW-Authenticate"), "Bearer", name)
		require.Equal(t, "/problems/unauthorized", problemType(t, res), name)
	}
}

// HS256 development tokens are read as strictly over HTTP: a quoted exp
// and a token issued an hour from now are 401 problems, a token issued
// within auth.ClockSkew ahead of our clock lists its buyer's orders.
func TestHS256BearerTimesOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	buyer := uuid.New()
	sign := func(mutate func(jwt.MapClaims)) string {
		c := jwt.MapClaims{"sub": buyer.String(), "role": "buyer", "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
		mutate(c)
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(jwtSecret)
		require.NoError(t, err)
		return b.remember(s)
	}
	res := b.do(t, http.MethodGet, "/v1/orders", bearer(sign(func(c jwt.MapClaims) {
		c["iat"] = time.Now().Add(auth.ClockSkew / 2).Unix()
	})), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	for name, mutate := range map[string]func(jwt.MapClaims){
		"StringExp":      func(c jwt.MapClaims) { c["exp"] = "9999999999" },
		"IssuedInAnHour": func(c jwt.MapClaims) { c["iat"] = time.Now().Add(time.Hour).Unix() },
	} {
		res := b.do(t, http.MethodGet, "/v1/orders", bearer(sign(mutate)), nil)
		require.Equal(t, http.StatusUnauthorized, res.status, "%s: %s", name, res.body)
		require.Contains(t, res.header.Get("WWW-Authenticate"), `error="invalid_token"`, name)
		require.Equal(t, "/problems/unauthorized", problemType(t, res), name)
	}
}
