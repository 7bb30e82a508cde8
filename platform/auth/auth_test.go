package auth_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/auth"
)

// VerifyUntil returns the identity Verify returns and the token's expiry;
// a token signed with another secret verifies neither way.
func TestVerifyUntilReturnsTheExpiry(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdef")
	id := auth.Identity{UserID: uuid.New(), Role: auth.RoleBuyer}
	token, err := auth.Mint(secret, id, time.Hour)
	require.NoError(t, err)
	v := auth.NewVerifier(secret)

	got, exp, err := v.VerifyUntil(token)
	require.NoError(t, err)
	require.Equal(t, id, got)
	require.WithinDuration(t, time.Now().Add(time.Hour), exp, 2*time.Second)
	same, err := v.Verify(token)
	require.NoError(t, err)
	require.Equal(t, got, same)

	_, exp, err = auth.NewVerifier([]byte("another-secret-another-secret-00")).VerifyUntil(token)
	require.ErrorIs(t, err, auth.ErrInvalidToken)
	require.True(t, exp.IsZero())
}

// A token's times are JSON numbers checked against the clock within
// auth.ClockSkew: a quoted exp, iat or nbf is refused however far off it
// is, and so are a token issued an hour from now and one without exp; a
// token issued a few seconds ahead of our clock is accepted.
func TestVerifierReadsTimesStrictly(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdef")
	v := auth.NewVerifier(secret)
	sub := uuid.New()
	sign := func(t *testing.T, mutate func(jwt.MapClaims)) string {
		t.Helper()
		now := time.Now()
		c := jwt.MapClaims{"sub": sub.String(), "role": "buyer", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		mutate(c)
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
		require.NoError(t, err)
		return s
	}
	soon := time.Now().Add(time.Hour).Unix()
	for name, mutate := range map[string]func(jwt.MapClaims){
		"StringExp":       func(c jwt.MapClaims) { c["exp"] = "9999999999" },
		"StringExpSoon":   func(c jwt.MapClaims) { c["exp"] = strconv.FormatInt(soon, 10) },
		"StringIat":       func(c jwt.MapClaims) { c["iat"] = strconv.FormatInt(time.Now().Unix(), 10) },
		"StringNbf":       func(c jwt.MapClaims) { c["nbf"] = strconv.FormatInt(time.Now().Unix(), 10) },
		"NullExp":         func(c jwt.MapClaims) { c["exp"] = nil },
		"NoExp":           func(c jwt.MapClaims) { delete(c, "exp") },
		"IssuedInAnHour":  func(c jwt.MapClaims) { c["iat"] = soon },
		"NotBeforeAnHour": func(c jwt.MapClaims) { c["nbf"] = soon },
		"ExpiredPastSkew": func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-auth.ClockSkew - 5*time.Second).Unix() },
		"NumericSub":      func(c jwt.MapClaims) { c["sub"] = 42 },
		"RoleInAList":     func(c jwt.MapClaims) { c["role"] = []string{"buyer"} },
	} {
		_, err := v.Verify(sign(t, mutate))
		require.ErrorIs(t, err, auth.ErrInvalidToken, name)
	}
	for name, mutate := range map[string]func(jwt.MapClaims){
		"IssuedWithinTheSkew":  func(c jwt.MapClaims) { c["iat"] = time.Now().Add(auth.ClockSkew / 2).Unix() },
		"ExpiredWithinTheSkew": func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-auth.ClockSkew / 2).Unix() },
		"NoIat":                func(c jwt.MapClaims) { delete(c, "iat") },
		"FractionalExp":        func(c jwt.MapClaims) { c["exp"] = float64(soon) + 0.5 },
	} {
		got, err := v.Verify(sign(t, mutate))
		require.NoError(t, err, name)
		require.Equal(t, auth.Identity{UserID: sub, Role: auth.RoleBuyer}, got, name)
	}
}
