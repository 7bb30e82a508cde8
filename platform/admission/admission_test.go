package admission_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/admission"
)

func TestAdmissionTokens(t *testing.T) {
	t.Parallel()
	user, event := uuid.New(), uuid.New()
	newKey := func(t *testing.T) ed25519.PrivateKey {
		t.Helper()
		_, k, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
		return k
	}

	t.Run("VerifiesWithOnlyThePublicJWKS", func(t *testing.T) {
		t.Parallel()
		s := admission.NewSigner(admission.SignerConfig{SigningKey: newKey(t)})
		tok, issued, err := s.Issue(user, event, "default")
		require.NoError(t, err)
		raw, err := json.Marshal(s.JWKS())
		require.NoError(t, err)
		require.NotContains(t, string(raw), `"d"`, "no private part is published")

		edge, err := admission.NewVerifierFromJWKS(raw)
		require.NoError(t, err)
		got, err := edge.Verify(tok, user, event, "default")
		require.NoError(t, err)
		require.Equal(t, issued, got)

		head, _, err := jwt.NewParser().ParseUnverified(tok, &jwt.MapClaims{})
		require.NoError(t, err)
		require.Equal(t, "EdDSA", head.Header["alg"])
		require.Equal(t, admission.KeyID(s.PublicKey()), head.Header["kid"])
	})

	t.Run("RefusesAnotherKeyAndHS256WithoutALegacyKey", func(t *testing.T) {
		t.Parallel()
		s := admission.NewSigner(admission.SignerConfig{SigningKey: newKey(t)})
		other := admission.NewSigner(admission.SignerConfig{SigningKey: newKey(t)})
		tok, _, err := other.Issue(user, event, "default")
		require.NoError(t, err)
		_, err = s.Verify(tok, user, event, "default")
		require.ErrorIs(t, err, admission.ErrInvalid)

		hs, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"jti": uuid.NewString(), "sub": user.String(), "event_id": event.String(), "cell": "default",
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString([]byte(s.PublicKey()))
		require.NoError(t, err)
		_, err = s.Verify(hs, user, event, "default")
		require.ErrorIs(t, err, admission.ErrInvalid, "the public key is no HMAC secret")
	})

	t.Run("KeepsVerifyingLegacyHS256Tokens", func(t *testing.T) {
		t.Parallel()
		legacy := []byte("legacy-admission-key-0123456789abcdef")
		hs, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"jti": uuid.NewString(), "sub": user.String(), "event_id": event.String(), "cell": "default",
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString(legacy)
		require.NoError(t, err)
		s := admission.NewSigner(admission.SignerConfig{SigningKey: newKey(t), Key: legacy})
		_, err = s.Verify(hs, user, event, "default")
		require.NoError(t, err)
		// A signer of the legacy key alone signs with the key derived
		// from it, which its public JWKS verifies.
		derived := admission.NewSigner(admission.SignerConfig{Key: legacy})
		require.True(t, derived.PublicKey().Equal(admission.DeriveSigningKey(legacy).Public()))
		tok, _, err := derived.Issue(user, event, "default")
		require.NoError(t, err)
		_, err = admission.NewVerifier(derived.PublicKey()).Verify(tok, user, event, "default")
		require.NoError(t, err)
	})

	// Times are JSON numbers: a token whose exp or iat is a quoted
	// number is refused, signed by the signing key or by the legacy one.
	// So is a token issued an hour from now, or without iat.
	t.Run("RefusesTimesThatAreNotNumbers", func(t *testing.T) {
		t.Parallel()
		key, legacy := newKey(t), []byte("legacy-admission-key-0123456789abcdef")
		s := admission.NewSigner(admission.SignerConfig{SigningKey: key, Key: legacy})
		sign := func(t *testing.T, method jwt.SigningMethod, mutate func(jwt.MapClaims)) string {
			t.Helper()
			c := jwt.MapClaims{
				"jti": uuid.NewString(), "sub": user.String(), "event_id": event.String(), "cell": "default",
				"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix(),
			}
			mutate(c)
			tok := jwt.NewWithClaims(method, c)
			var signKey any = legacy
			if method == jwt.SigningMethodEdDSA {
				tok.Header["kid"] = admission.KeyID(s.PublicKey())
				signKey = key
			}
			raw, err := tok.SignedString(signKey)
			require.NoError(t, err)
			return raw
		}
		for _, method := range []jwt.SigningMethod{jwt.SigningMethodEdDSA, jwt.SigningMethodHS256} {
			_, err := s.Verify(sign(t, method, func(jwt.MapClaims) {}), user, event, "default")
			require.NoError(t, err, "%s: the well-formed token", method.Alg())
			for name, mutate := range map[string]func(jwt.MapClaims){
				"StringExp":      func(c jwt.MapClaims) { c["exp"] = "9999999999" },
				"StringIat":      func(c jwt.MapClaims) { c["iat"] = strconv.FormatInt(time.Now().Unix(), 10) },
				"IssuedInAnHour": func(c jwt.MapClaims) { c["iat"] = time.Now().Add(time.Hour).Unix() },
				"NoIat":          func(c jwt.MapClaims) { delete(c, "iat") },
				"NumericCell":    func(c jwt.MapClaims) { c["cell"] = 1 },
			} {
				_, err := s.Verify(sign(t, method, mutate), user, event, "default")
				require.ErrorIs(t, err, admission.ErrInvalid, "%s: %s", method.Alg(), name)
			}
		}
	})

	t.Run("ParsesPEMAndBase64Keys", func(t *testing.T) {
		t.Parallel()
		k := newKey(t)
		der, err := x509.MarshalPKCS8PrivateKey(k)
		require.NoError(t, err)
		for name, s := range map[string]string{
			"PEM":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
			"Seed":   base64.StdEncoding.EncodeToString(k.Seed()),
			"Whole":  base64.StdEncoding.EncodeToString(k),
			"Spaced": "\n" + base64.StdEncoding.EncodeToString(k.Seed()) + "\n",
		} {
			got, err := admission.ParseSigningKey(s)
			require.NoError(t, err, name)
			require.True(t, k.Equal(got), name)
		}
		for _, bad := range []string{"", "not base64!", base64.StdEncoding.EncodeToString([]byte("short")), "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----"} {
			_, err := admission.ParseSigningKey(bad)
			require.Error(t, err, bad)
		}
	})
}
