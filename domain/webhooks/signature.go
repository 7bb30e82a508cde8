package webhooks

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"boxoffice/platform/fault"
)

// Standard Webhooks header names (https://www.standardwebhooks.com).
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts every endpoint secret: "whsec_" then the base64 of
// the HMAC key.
const SecretPrefix = "whsec_"

// secretKeyBytes is the length of a generated key: 24 bytes, 192 bits,
// within the 24–64 the Standard Webhooks specification recommends.
const secretKeyBytes = 24

// NewSecret returns a fresh random endpoint secret, whsec_<base64 of 24
// bytes>. It is sensitive: shown to the organizer once, never logged.
func NewSecret() (string, error) {
	b := make([]byte, secretKeyBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate webhook secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// ErrInvalidSecret is returned for a secret that is not whsec_ followed by
// standard base64.
var ErrInvalidSecret = fault.New(fault.CodeInvalid, "webhook secret must be whsec_ followed by base64")

// Key is the HMAC key of a secret.
type Key []byte

// ParseSecret returns the HMAC key of secret. Returns ErrInvalidSecret for
// a malformed one; the error never contains the secret.
func ParseSecret(secret string) (Key, error) {
	s, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, ErrInvalidSecret
	}
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(k) == 0 {
		return nil, ErrInvalidSecret
	}
	return k, nil
}

// MessageID is the webhook-id of a message: msg_ then its UUID. It is the
// same on every attempt, retry and replay of the message, so receivers
// dedupe on it.
func MessageID(id uuid.UUID) string { return "msg_" + id.String() }

// ParseMessageID accepts a message id as the API shows it (a UUID) or as
// the webhook-id header carries it (msg_<UUID>).
func ParseMessageID(s string) (uuid.UUID, error) {
	return uuid.Parse(strings.TrimPrefix(s, "msg_"))
}

// Sign returns the webhook-signature header value for the exact bytes
// body sent as message id at ts: "v1,<base64 HMAC-SHA256 of id.ts.body>"
// per key, separated by spaces (several keys while a secret is rotated).
// The bytes are signed as they are, never re-encoded.
func Sign(keys []Key, id string, ts time.Time, body []byte) string {
	var b strings.Builder
	unix := strconv.FormatInt(ts.Unix(), 10)
	sum := make([]byte, 0, sha256.Size)
	for i, k := range keys {
		mac := hmac.New(sha256.New, k)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(unix))
		mac.Write([]byte{'.'})
		mac.Write(body)
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(sum[:0])))
	}
	return b.String()
}
