package auth_test

import (
	"testing"
	"time"

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
