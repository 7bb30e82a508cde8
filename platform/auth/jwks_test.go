package auth_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/auth"
	"boxoffice/testkit"
)

const (
	testIssuer   = "https://idp.example.com/"
	testAudience = "boxoffice-api"
)

// idp is an identity provider in a test: a JWKS served over HTTP whose
// keys the test rotates, and the private keys to sign with.
type idp struct {
	srv     *httptest.Server
	fetches atomic.Int64
	mu      sync.Mutex
	jwks    []byte
	keys    map[string]crypto.Signer
}

func newIDP(t *testing.T) *idp {
	t.Helper()
	p := &idp{keys: map[string]crypto.Signer{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		p.fetches.Add(1)
		p.mu.Lock()
		body := p.jwks
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// publish makes the served JWKS exactly the public halves of kids.
func (p *idp) publish(t *testing.T, kids ...string) {
	t.Helper()
	store := jwkset.NewMemoryStorage()
	for _, kid := range kids {
		j, err := jwkset.NewJWKFromKey(p.keys[kid].Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid}})
		require.NoError(t, err)
		require.NoError(t, store.KeyWrite(context.Background(), j))
	}
	raw, err := store.JSONPublic(context.Background())
	require.NoError(t, err)
	p.mu.Lock()
	p.jwks = raw
	p.mu.Unlock()
}

func (p *idp) addKey(t *testing.T, kid string, key crypto.Signer) {
	t.Helper()
	p.keys[kid] = key
}

type tokenOpts struct {
	method   jwt.SigningMethod
	issuer   string
	audience string
	exp      time.Duration
	// claims changes the claims before they are signed.
	claims func(jwt.MapClaims)
}

// sign returns a token of id signed by the key kid.
func (p *idp) sign(t *testing.T, kid string, id auth.Identity, o tokenOpts) string {
	t.Helper()
	if o.issuer == "" {
		o.issuer = testIssuer
	}
	if o.audience == "" {
		o.audience = testAudience
	}
	if o.exp == 0 {
		o.exp = time.Hour
	}
	claims := jwt.MapClaims{
		"sub": id.UserID.String(), "role": string(id.Role), "iss": o.issuer, "aud": o.audience,
		"exp": time.Now().Add(o.exp).Unix(), "iat": time.Now().Unix(),
	}
	if id.OrganizerID != uuid.Nil {
		claims["org"] = id.OrganizerID.String()
	}
	if o.claims != nil {
		o.claims(claims)
	}
	tok := jwt.NewWithClaims(o.method, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(p.keys[kid])
	require.NoError(t, err)
	return s
}

func newJWKSVerifier(t *testing.T, p *idp, secret []byte) *auth.Verifier {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := auth.New(ctx, auth.VerifierConfig{
		JWKSURL: p.srv.URL, Issuer: testIssuer, Audience: testAudience, Secret: secret,
		Logger: testkit.NewLog(t).Logger, UnknownKIDInterval: time.Hour,
	})
	require.NoError(t, err)
	return v
}

func rsaKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	return k
}

func TestJWKSVerifier(t *testing.T) {
	t.Parallel()
	buyer := auth.Identity{UserID: uuid.New(), Role: auth.RoleBuyer}
	organizer := auth.Identity{UserID: uuid.New(), Role: auth.RoleOrganizer, OrganizerID: uuid.New()}

	t.Run("AcceptsEveryKeyTypeByItsAlgorithm", func(t *testing.T) {
		t.Parallel()
		p := newIDP(t)
		ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		_, ed, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
		p.addKey(t, "rsa", rsaKey(t))
		p.addKey(t, "ec", ec)
		p.addKey(t, "ed", ed)
		p.publish(t, "rsa", "ec", "ed")
		v := newJWKSVerifier(t, p, nil)
		for kid, m := range map[string]jwt.SigningMethod{"rsa": jwt.SigningMethodRS256, "ec": jwt.SigningMethodES256, "ed": jwt.SigningMethodEdDSA} {
			got, err := v.Verify(p.sign(t, kid, organizer, tokenOpts{method: m}))
			require.NoError(t, err, kid)
			require.Equal(t, organizer, got)
		}
	})

	t.Run("AcceptsAKeyRotatedInAfterRefresh", func(t *testing.T) {
		t.Parallel()
		p := newIDP(t)
		p.addKey(t, "old", rsaKey(t))
		p.publish(t, "old")
		v := newJWKSVerifier(t, p, nil)
		_, err := v.Verify(p.sign(t, "old", buyer, tokenOpts{method: jwt.SigningMethodRS256}))
		require.NoError(t, err)

		// The provider rotates: a new key, the old one withdrawn.
		_, ed, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
		p.addKey(t, "new", ed)
		p.publish(t, "new")
		before := p.fetches.Load()
		got, err := v.Verify(p.sign(t, "new", buyer, tokenOpts{method: jwt.SigningMethodEdDSA}))
		require.NoError(t, err)
		require.Equal(t, buyer, got)
		require.Equal(t, before+1, p.fetches.Load(), "the unknown kid fetched the set once")
	})

	t.Run("ForgedKidsRefetchAtMostOncePerInterval", func(t *testing.T) {
		t.Parallel()
		p := newIDP(t)
		p.addKey(t, "real", rsaKey(t))
		p.publish(t, "real")
		v := newJWKSVerifier(t, p, nil)
		before := p.fetches.Load()
		for range 20 {
			forged := rsaKey(t)
			kid := uuid.NewString()
			p.addKey(t, kid, forged)
			_, err := v.Verify(p.sign(t, kid, buyer, tokenOpts{method: jwt.SigningMethodRS256}))
			require.ErrorIs(t, err, auth.ErrInvalidToken)
		}
		require.LessOrEqual(t, p.fetches.Load()-before, int64(1))
	})

	t.Run("RefusesWhatItMust", func(t *testing.T) {
		t.Parallel()
		p := newIDP(t)
		p.addKey(t, "rsa", rsaKey(t))
		ec384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		require.NoError(t, err)
		p.addKey(t, "ec384", ec384)
		p.publish(t, "rsa", "ec384")
		v := newJWKSVerifier(t, p, nil)
		secret := []byte("0123456789abcdef0123456789abcdef")
		hs, err := auth.Mint(secret, buyer, time.Hour)
		require.NoError(t, err)
		none, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{
			"sub": buyer.UserID.String(), "role": "buyer", "iss": testIssuer, "aud": testAudience, "exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString(jwt.UnsafeAllowNoneSignatureType)
		require.NoError(t, err)
		noKid := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
			"sub": buyer.UserID.String(), "role": "buyer", "iss": testIssuer, "aud": testAudience, "exp": time.Now().Add(time.Hour).Unix(),
		})
		noKidTok, err := noKid.SignedString(p.keys["rsa"])
		require.NoError(t, err)
		for name, tok := range map[string]string{
			"AlgNone":               none,
			"HS256WithOnlyJWKS":     hs,
			"WrongIssuer":           p.sign(t, "rsa", buyer, tokenOpts{method: jwt.SigningMethodRS256, issuer: "https://evil.example.com/"}),
			"WrongAudience":         p.sign(t, "rsa", buyer, tokenOpts{method: jwt.SigningMethodRS256, audience: "another-api"}),
			"Expired":               p.sign(t, "rsa", buyer, tokenOpts{method: jwt.SigningMethodRS256, exp: -time.Hour}),
			"ES256OnAP384Key":       p.sign(t, "ec384", buyer, tokenOpts{method: jwt.SigningMethodES384}),
			"NoKid":                 noKidTok,
			"RS256KeyForPS256Token": p.sign(t, "rsa", buyer, tokenOpts{method: jwt.SigningMethodPS256}),
			"StringExp": p.sign(t, "rsa", buyer, tokenOpts{method: jwt.SigningMethodRS256, claims: func(c jwt.MapClaims) {
				c["exp"] = "9999999999"
			}}),
			"IssuedInAnHour": p.sign(t, "rsa", buyer, tokenOpts{method: jwt.SigningMethodRS256, claims: func(c jwt.MapClaims) {
				c["iat"] = time.Now().Add(time.Hour).Unix()
			}}),
		} {
			_, err := v.Verify(tok)
			require.ErrorIs(t, err, auth.ErrInvalidToken, name)
		}
	})

	t.Run("AcceptsAnIssuerClockAheadWithinTheSkew", func(t *testing.T) {
		t.Parallel()
		p := newIDP(t)
		p.addKey(t, "rsa", rsaKey(t))
		p.publish(t, "rsa")
		v := newJWKSVerifier(t, p, nil)
		got, err := v.Verify(p.sign(t, "rsa", buyer, tokenOpts{method: jwt.SigningMethodRS256, claims: func(c jwt.MapClaims) {
			c["iat"] = time.Now().Add(auth.ClockSkew / 2).Unix()
		}}))
		require.NoError(t, err)
		require.Equal(t, buyer, got)
	})

	t.Run("AcceptsHS256BesideJWKSWhenASecretIsSet", func(t *testing.T) {
		t.Parallel()
		p := newIDP(t)
		p.addKey(t, "rsa", rsaKey(t))
		p.publish(t, "rsa")
		secret := []byte("0123456789abcdef0123456789abcdef")
		v := newJWKSVerifier(t, p, secret)
		hs, err := auth.Mint(secret, buyer, time.Hour)
		require.NoError(t, err)
		got, err := v.Verify(hs)
		require.NoError(t, err)
		require.Equal(t, buyer, got)
		got, err = v.Verify(p.sign(t, "rsa", organizer, tokenOpts{method: jwt.SigningMethodRS256}))
		require.NoError(t, err)
		require.Equal(t, organizer, got)
	})

	t.Run("NeedsIssuerAndAudience", func(t *testing.T) {
		t.Parallel()
		p := newIDP(t)
		_, err := auth.New(context.Background(), auth.VerifierConfig{JWKSURL: p.srv.URL, Issuer: testIssuer, Logger: testkit.NewLog(t).Logger})
		require.Error(t, err)
		_, err = auth.New(context.Background(), auth.VerifierConfig{})
		require.Error(t, err)
	})
}
