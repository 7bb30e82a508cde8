package webhooks

import (
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// vector is one entry of the shared Standard Webhooks test vectors.
type vector struct {
	Secret    string `json:"secret"`
	ID        string `json:"id"`
	Timestamp int64  `json:"timestamp"`
	Body      string `json:"body"`
	Signature string `json:"signature"`
}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	raw, err := os.ReadFile("testdata/standard-webhooks.json")
	require.NoError(t, err)
	var vs []vector
	require.NoError(t, json.Unmarshal(raw, &vs))
	require.NotEmpty(t, vs)
	return vs
}

func TestSign(t *testing.T) {
	t.Parallel()

	t.Run("ReproducesEveryVector", func(t *testing.T) {
		t.Parallel()
		for _, v := range loadVectors(t) {
			key, err := ParseSecret(v.Secret)
			require.NoError(t, err)
			require.Equal(t, v.Signature, Sign([]Key{key}, v.ID, time.Unix(v.Timestamp, 0), []byte(v.Body)), v.ID)
		}
	})

	t.Run("OfficialLibraryVerifiesOurSignatures", func(t *testing.T) {
		t.Parallel()
		for _, v := range loadVectors(t) {
			key, err := ParseSecret(v.Secret)
			require.NoError(t, err)
			h := http.Header{}
			h.Set(standardwebhooks.HeaderWebhookID, v.ID)
			h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(v.Timestamp, 10))
			h.Set(standardwebhooks.HeaderWebhookSignature, Sign([]Key{key}, v.ID, time.Unix(v.Timestamp, 0), []byte(v.Body)))
			wh, err := standardwebhooks.NewWebhook(v.Secret)
			require.NoError(t, err)
			require.NoError(t, wh.VerifyIgnoringTimestamp([]byte(v.Body), h), v.ID)
			// One changed byte of the body fails.
			require.Error(t, wh.VerifyIgnoringTimestamp([]byte(v.Body+" "), h))
		}
	})

	t.Run("FreshSecretSignsAndVerifiesNow", func(t *testing.T) {
		t.Parallel()
		secret, err := NewSecret()
		require.NoError(t, err)
		require.Regexp(t, `^whsec_[A-Za-z0-9+/]{32}$`, secret)
		key, err := ParseSecret(secret)
		require.NoError(t, err)
		other, err := NewSecret()
		require.NoError(t, err)
		otherKey, err := ParseSecret(other)
		require.NoError(t, err)
		body := []byte(`{"type":"order.paid","timestamp":"2026-01-01T00:00:00Z","data":{}}`)
		now := time.Now()
		h := http.Header{}
		h.Set(HeaderID, "msg_1")
		h.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		h.Set(HeaderSignature, Sign([]Key{otherKey, key}, "msg_1", now, body))
		for _, s := range []string{secret, other} {
			wh, err := standardwebhooks.NewWebhook(s)
			require.NoError(t, err)
			require.NoError(t, wh.Verify(body, h), "each of two signatures verifies on its own")
		}
	})

	t.Run("RejectsMalformedSecrets", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{"", "whsec_", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_!!!"} {
			_, err := ParseSecret(s)
			require.ErrorIs(t, err, ErrInvalidSecret, s)
		}
	})
}
