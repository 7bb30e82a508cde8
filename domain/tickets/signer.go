package tickets

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"boxoffice/platform/fault"
)

// Namespace is the UUIDv5 namespace of ticket ids. It must never change:
// ticket ids derived under another namespace would duplicate tickets that
// already exist.
var Namespace = uuid.MustParse("6f1d1c5e-2b8a-5c57-9a43-0b6e3f3b7c11")

// ID is the stable id of the ticket for seat in order: UUIDv5 of the order
// id's and the seat id's 16 bytes under Namespace. Issuing again yields the
// same id, which is what makes retried issuance idempotent.
func ID(orderID, seatID uuid.UUID) uuid.UUID {
	name := make([]byte, 0, 32)
	name = append(name, orderID[:]...)
	name = append(name, seatID[:]...)
	return uuid.NewSHA1(Namespace, name)
}

// Ticket is what a QR payload carries and a scanner learns from it.
type Ticket struct {
	ID      uuid.UUID
	OrderID uuid.UUID
	SeatID  uuid.UUID
	EventID uuid.UUID
	// IssuedAt has a precision of one second; Sign drops anything finer.
	IssuedAt time.Time
}

// SeedSize is the size of a signing key seed, Ed25519's private key seed.
const SeedSize = ed25519.SeedSize

// Format of a payload; see the package documentation.
const (
	payloadPrefix = "BX1."
	bodySize      = 4*16 + 8
)

var b64 = base64.RawURLEncoding.Strict()

// ErrInvalidPayload is returned by Verify for a payload that is not a
// well-formed BX1 payload, or whose signature does not verify under the
// key. Callers cannot tell forged from garbled, and need not.
var ErrInvalidPayload = fault.New(fault.CodeInvalid, "invalid ticket payload")

// GenerateSeed returns a fresh random signing key seed, for
// BOXOFFICE_TICKET_SIGNING_KEY (base64 of these bytes) or for tests.
func GenerateSeed() ([]byte, error) {
	seed := make([]byte, SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return nil, fmt.Errorf("generate ticket signing seed: %w", err)
	}
	return seed, nil
}

// ParseSeed decodes the base64 (standard alphabet, padded or not) text of
// a seed, as BOXOFFICE_TICKET_SIGNING_KEY holds it. The error names the
// problem, never the text.
func ParseSeed(text string) ([]byte, error) {
	seed, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil {
		seed, err = base64.RawStdEncoding.DecodeString(strings.TrimSpace(text))
	}
	if err != nil {
		return nil, errors.New("ticket signing key is not base64")
	}
	if len(seed) != SeedSize {
		return nil, fmt.Errorf("ticket signing key is %d bytes, want %d", len(seed), SeedSize)
	}
	return seed, nil
}

// Signer signs tickets with one Ed25519 key. It is safe for concurrent use.
type Signer struct {
	key ed25519.PrivateKey
}

// NewSigner returns the Signer of the Ed25519 key with the 32-byte seed.
// Returns an error when seed has the wrong size.
func NewSigner(seed []byte) (*Signer, error) {
	if len(seed) != SeedSize {
		return nil, fmt.Errorf("ticket signing seed is %d bytes, want %d", len(seed), SeedSize)
	}
	return &Signer{key: ed25519.NewKeyFromSeed(seed)}, nil
}

// PublicKey is the key scanners verify payloads with. It is not secret.
func (s *Signer) PublicKey() ed25519.PublicKey {
	return s.key.Public().(ed25519.PublicKey)
}

// Sign returns the QR payload of t. Signing is deterministic: the same
// ticket and key give the same payload.
func (s *Signer) Sign(t Ticket) string {
	body := make([]byte, 0, bodySize)
	body = append(body, t.ID[:]...)
	body = append(body, t.OrderID[:]...)
	body = append(body, t.SeatID[:]...)
	body = append(body, t.EventID[:]...)
	body = binary.BigEndian.AppendUint64(body, uint64(t.IssuedAt.Unix()))
	signed := payloadPrefix + b64.EncodeToString(body)
	return signed + "." + b64.EncodeToString(ed25519.Sign(s.key, []byte(signed)))
}

// Verify checks payload against publicKey and returns the ticket it
// carries, IssuedAt in UTC. It needs no network and no database, so an
// offline scanner can run it. Returns ErrInvalidPayload for a malformed
// payload or a signature that does not verify, and an error for a public
// key of the wrong size.
func Verify(publicKey ed25519.PublicKey, payload string) (Ticket, error) {
	if len(publicKey) != ed25519.PublicKeySize {
		return Ticket{}, fmt.Errorf("ticket public key is %d bytes, want %d", len(publicKey), ed25519.PublicKeySize)
	}
	rest, ok := strings.CutPrefix(payload, payloadPrefix)
	if !ok {
		return Ticket{}, ErrInvalidPayload
	}
	bodyText, sigText, ok := strings.Cut(rest, ".")
	if !ok {
		return Ticket{}, ErrInvalidPayload
	}
	body, err := b64.DecodeString(bodyText)
	if err != nil || len(body) != bodySize {
		return Ticket{}, ErrInvalidPayload
	}
	sig, err := b64.DecodeString(sigText)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return Ticket{}, ErrInvalidPayload
	}
	if !ed25519.Verify(publicKey, []byte(payloadPrefix+bodyText), sig) {
		return Ticket{}, ErrInvalidPayload
	}
	var t Ticket
	copy(t.ID[:], body[0:16])
	copy(t.OrderID[:], body[16:32])
	copy(t.SeatID[:], body[32:48])
	copy(t.EventID[:], body[48:64])
	t.IssuedAt = time.Unix(int64(binary.BigEndian.Uint64(body[64:72])), 0).UTC()
	return t, nil
}
