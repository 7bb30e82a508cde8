package webhooks

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/uuid"

	"boxoffice/platform/fault"
)

// sealedVersion starts every sealed secret: "v1:<key id>:<base64>".
const sealedVersion = "v1"

// KeyringKeyBytes is the length of every key of a Keyring: AES-256.
const KeyringKeyBytes = 32

// keyIDPattern is what a key id may be: short, and free of the ':' and
// ',' that separate the parts of a stored value and of the key list.
var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,32}$`)

// Reasons a stored secret cannot be used, as the signature failures
// metric's reason label: a small fixed set.
const (
	// SecretUnknownKey: the secret was sealed under a key id the keyring
	// does not hold (a key dropped from BOXOFFICE_WEBHOOK_SECRET_KEYS too
	// early).
	SecretUnknownKey = "unknown_key"
	// SecretDecryptFailed: the stored value is not a sealed secret, or it
	// does not open (altered, or moved from another endpoint's row).
	SecretDecryptFailed = "decrypt_failed"
	// SecretMalformed: it opened (or was legacy plaintext) but is not
	// whsec_ followed by base64.
	SecretMalformed = "malformed"
)

// SecretError says why a stored secret cannot be used. It never holds the
// secret, sealed or not.
type SecretError struct {
	// Reason is SecretUnknownKey, SecretDecryptFailed or SecretMalformed.
	Reason string
}

func (e *SecretError) Error() string { return "webhook secret unusable: " + e.Reason }

// Code is fault.CodeUnavailable: the endpoint cannot be signed for until
// its secret is rotated or its key restored.
func (e *SecretError) Code() fault.Code { return fault.CodeUnavailable }

// Keyring seals endpoint secrets at rest with AES-256-GCM. It holds one or
// more keys, each with an id; the first seals, every one opens, so a new
// key is rolled in by putting it first and the old one is dropped once
// the background re-sealing (Resealer) has moved every row off it.
//
// A sealed secret is "v1:<key id>:<base64 of the 12-byte nonce and the
// ciphertext>", with the endpoint's id as associated data: a value copied
// into another endpoint's row does not open. A stored value that starts
// with whsec_ is a legacy plaintext secret (written before secrets were
// sealed): Open returns it as it is, and the Resealer seals it.
type Keyring struct {
	current string
	aeads   map[string]cipher.AEAD
}

// ParseKeyring reads a key list such as BOXOFFICE_WEBHOOK_SECRET_KEYS:
// comma-separated "<key id>:<standard base64 of 32 bytes>", the first of
// which seals. Key ids are 1–32 of A-Z, a-z, 0-9, '_', '.', '-', each
// once. The error names the entry by position, never a key.
func ParseKeyring(list string) (*Keyring, error) {
	k := &Keyring{aeads: map[string]cipher.AEAD{}}
	for i, entry := range strings.Split(list, ",") {
		id, b64, ok := strings.Cut(strings.TrimSpace(entry), ":")
		if !ok || !keyIDPattern.MatchString(id) {
			return nil, fmt.Errorf("webhook secret key %d: expected <key id>:<base64 key>, the id 1-32 of A-Z a-z 0-9 _ . -", i+1)
		}
		if _, dup := k.aeads[id]; dup {
			return nil, fmt.Errorf("webhook secret key %d: key id %q is listed twice", i+1, id)
		}
		key, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(key) != KeyringKeyBytes {
			return nil, fmt.Errorf("webhook secret key %d (%s): must be the standard base64 of %d bytes", i+1, id, KeyringKeyBytes)
		}
		aead, err := newAEAD(key)
		if err != nil {
			return nil, fmt.Errorf("webhook secret key %d (%s): %w", i+1, id, err)
		}
		k.aeads[id] = aead
		if i == 0 {
			k.current = id
		}
	}
	return k, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("aes: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("gcm: %w", err)
	}
	return aead, nil
}

// CurrentKeyID is the id of the key Seal uses.
func (k *Keyring) CurrentKeyID() string { return k.current }

// currentPrefix starts every value sealed under the current key.
func (k *Keyring) currentPrefix() string { return sealedVersion + ":" + k.current + ":" }

// associatedData binds a sealed secret to its endpoint.
func associatedData(endpointID uuid.UUID) []byte {
	return []byte("boxoffice/webhook_endpoints.secret/" + endpointID.String())
}

// Seal returns secret sealed under the current key for the endpoint.
func (k *Keyring) Seal(endpointID uuid.UUID, secret string) (string, error) {
	aead := k.aeads[k.current]
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(secret)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal webhook secret: %w", err)
	}
	out := aead.Seal(nonce, nonce, []byte(secret), associatedData(endpointID))
	return k.currentPrefix() + base64.StdEncoding.EncodeToString(out), nil
}

// Open returns the plaintext of the endpoint's stored secret: a sealed one
// opened with the key its id names, a legacy whsec_ one as it is. Returns
// a *SecretError when it cannot (SecretUnknownKey, SecretDecryptFailed);
// Open does not check that the plaintext is a valid secret (ParseSecret
// does).
func (k *Keyring) Open(endpointID uuid.UUID, stored string) (string, error) {
	if strings.HasPrefix(stored, SecretPrefix) {
		return stored, nil
	}
	version, rest, _ := strings.Cut(stored, ":")
	id, b64, ok := strings.Cut(rest, ":")
	if version != sealedVersion || !ok {
		return "", &SecretError{SecretDecryptFailed}
	}
	aead, ok := k.aeads[id]
	if !ok {
		return "", &SecretError{SecretUnknownKey}
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) < aead.NonceSize()+aead.Overhead() {
		return "", &SecretError{SecretDecryptFailed}
	}
	n := aead.NonceSize()
	plain, err := aead.Open(nil, raw[:n], raw[n:], associatedData(endpointID))
	if err != nil {
		return "", &SecretError{SecretDecryptFailed}
	}
	return string(plain), nil
}

// openKey opens the endpoint's stored secret and parses it into its HMAC
// key. Returns a *SecretError.
func (k *Keyring) openKey(endpointID uuid.UUID, stored string) (Key, error) {
	plain, err := k.Open(endpointID, stored)
	if err != nil {
		return nil, err
	}
	key, err := ParseSecret(plain)
	if err != nil {
		return nil, &SecretError{SecretMalformed}
	}
	return key, nil
}

// secretReason is the metric reason of err: a SecretError's, or
// SecretDecryptFailed.
func secretReason(err error) string {
	var se *SecretError
	if errors.As(err, &se) {
		return se.Reason
	}
	return SecretDecryptFailed
}
