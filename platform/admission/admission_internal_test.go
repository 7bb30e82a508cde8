package admission

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// A remembered token answers as verifying it again would: still bound to
// its user and event, and refused once it has expired.
func TestRememberedTokensKeepTheirBounds(t *testing.T) {
	t.Parallel()
	s := NewSigner(SignerConfig{Key: []byte("admission-internal-test-key-0123456789abcdef"), TTL: time.Minute})
	now := time.Now()
	s.Verifier.now = func() time.Time { return now }
	s.now = s.Verifier.now
	user, event := uuid.New(), uuid.New()
	tok, _, err := s.Issue(user, event, "default")
	require.NoError(t, err)

	_, err = s.Verify(tok, user, event, "default")
	require.NoError(t, err)
	require.Equal(t, 1, s.verified.Len(), "remembered")
	_, err = s.Verify(tok, uuid.New(), event, "default")
	require.ErrorIs(t, err, ErrInvalid, "another user")
	_, err = s.Verify(tok, user, uuid.New(), "default")
	require.ErrorIs(t, err, ErrInvalid, "another event")
	_, err = s.Verify(tok, user, event, "other")
	require.ErrorIs(t, err, ErrInvalid, "another cell")

	now = now.Add(2 * time.Minute)
	_, err = s.Verify(tok, user, event, "default")
	require.ErrorIs(t, err, ErrInvalid, "expired, remembered or not")

	forged := tok[:len(tok)-2] + "AA"
	_, err = s.Verify(forged, user, event, "default")
	require.ErrorIs(t, err, ErrInvalid)
	_, remembered := s.verified.Get(forged, now)
	require.False(t, remembered, "a token that did not verify is not remembered")
}
