package webhooks

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// testKeyList is the tests' BOXOFFICE_WEBHOOK_SECRET_KEYS: one key, id
// "test".
var testKeyList = "test:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, KeyringKeyBytes))

// testKeys seals every secret the package's tests store.
var testKeys = mustKeyring(testKeyList)

func mustKeyring(list string) *Keyring {
	k, err := ParseKeyring(list)
	if err != nil {
		panic(err)
	}
	return k
}

func keyOf(b byte) string {
	return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, KeyringKeyBytes))
}

func TestKeyring(t *testing.T) {
	t.Parallel()

	t.Run("SealsUnderTheFirstKeyAndOpensOnlyForItsEndpoint", func(t *testing.T) {
		t.Parallel()
		k := mustKeyring("new:" + keyOf(1) + ",old:" + keyOf(2))
		secret, err := NewSecret()
		require.NoError(t, err)
		id := uuid.New()
		sealed, err := k.Seal(id, secret)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(sealed, "v1:new:"), sealed)
		require.NotContains(t, sealed, secret[len(SecretPrefix):])
		again, err := k.Seal(id, secret)
		require.NoError(t, err)
		require.NotEqual(t, sealed, again, "a fresh nonce every time")

		got, err := k.Open(id, sealed)
		require.NoError(t, err)
		require.Equal(t, secret, got)
		_, err = k.Open(uuid.New(), sealed)
		require.Equal(t, &SecretError{SecretDecryptFailed}, err, "a value moved to another endpoint's row does not open")
	})

	t.Run("OldKeysOpenUnknownKeysDoNot", func(t *testing.T) {
		t.Parallel()
		id := uuid.New()
		sealed, err := mustKeyring("old:"+keyOf(2)).Seal(id, "whsec_AAAA")
		require.NoError(t, err)
		got, err := mustKeyring("new:"+keyOf(1)+",old:"+keyOf(2)).Open(id, sealed)
		require.NoError(t, err)
		require.Equal(t, "whsec_AAAA", got)
		_, err = mustKeyring("new:"+keyOf(1)).Open(id, sealed)
		require.Equal(t, &SecretError{SecretUnknownKey}, err)
	})

	t.Run("TamperedValuesDoNotOpen", func(t *testing.T) {
		t.Parallel()
		id := uuid.New()
		sealed, err := testKeys.Seal(id, "whsec_AAAA")
		require.NoError(t, err)
		b := []byte(sealed)
		b[len(b)-3] ^= 1
		for _, v := range []string{string(b), "v1:test:", "v1:test:!!", "v2:test:" + sealed[8:], "garbage", ""} {
			_, err := testKeys.Open(id, v)
			require.Equal(t, &SecretError{SecretDecryptFailed}, err, v)
		}
	})

	t.Run("LegacyPlaintextOpensAsItIs", func(t *testing.T) {
		t.Parallel()
		got, err := testKeys.Open(uuid.New(), "whsec_AAAA")
		require.NoError(t, err)
		require.Equal(t, "whsec_AAAA", got)
		_, err = testKeys.openKey(uuid.New(), "whsec_not base64!")
		require.Equal(t, &SecretError{SecretMalformed}, err)
	})

	t.Run("ParseRefusesBadListsWithoutQuotingKeys", func(t *testing.T) {
		t.Parallel()
		for _, list := range []string{
			"", "nokey", "a:" + keyOf(1) + ",a:" + keyOf(2), "a:c2hvcnQ=", "bad id:" + keyOf(1), "a:" + keyOf(1) + "!",
			strings.Repeat("x", 33) + ":" + keyOf(1),
		} {
			_, err := ParseKeyring(list)
			require.Error(t, err, list)
			require.NotContains(t, err.Error(), keyOf(1))
		}
	})
}
