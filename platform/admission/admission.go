// Package admission issues and verifies admission tokens: short-lived,
// signed proof that a buyer was let through the waiting room for one event
// in one purchase cell. A token proves admission, not that a seat is free,
// and it is reusable until it expires, so a buyer retrying a hold with the
// same Idempotency-Key is never turned away.
package admission

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// ErrInvalid is returned for a token that is malformed, forged, expired, or
// bound to another user, event or cell.
var ErrInvalid = errors.New("invalid admission token")

// Claims are what an admission token binds.
type Claims struct {
	ID        uuid.UUID
	UserID    uuid.UUID
	EventID   uuid.UUID
	Cell      string
	IssuedAt  time.Time
	ExpiresAt time.Time
}

type jwtClaims struct {
	jwt.RegisteredClaims
	EventID string `json:"event_id"`
	Cell    string `json:"cell"`
}

// Signer issues and verifies admission tokens with one HS256 key.
type Signer struct {
	key    []byte
	ttl    time.Duration
	parser *jwt.Parser
	now    func() time.Time
}

// SignerConfig configures NewSigner.
type SignerConfig struct {
	// Key signs and verifies tokens. Required.
	Key []byte
	// TTL is how long a token admits its buyer. Defaults to 15m.
	TTL time.Duration
}

// NewSigner returns a Signer. It panics on an empty key, a programmer
// error: configuration is validated before this is called.
func NewSigner(cfg SignerConfig) *Signer {
	if len(cfg.Key) == 0 {
		panic("admission: empty key")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 15 * time.Minute
	}
	return &Signer{
		key: cfg.Key,
		ttl: cfg.TTL,
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
		),
		now: time.Now,
	}
}

// Issue returns a signed token admitting userID to eventID in cell.
func (s *Signer) Issue(userID, eventID uuid.UUID, cell string) (string, Claims, error) {
	now := s.now().Truncate(time.Second)
	c := Claims{
		ID:        uuid.New(),
		UserID:    userID,
		EventID:   eventID,
		Cell:      cell,
		IssuedAt:  now,
		ExpiresAt: now.Add(s.ttl),
	}
	tok, err := s.sign(c)
	return tok, c, err
}

// TTL is how long a token this Signer issues admits its buyer.
func (s *Signer) TTL() time.Duration { return s.ttl }

// Sign returns the token for claims decided elsewhere: the waiting room
// records an admission (jti, issue and expiry times) once, in Redis, and
// signs it again on every poll. Signing is deterministic at second
// precision, so every poll returns the same token.
func (s *Signer) Sign(c Claims) (string, error) {
	c.IssuedAt, c.ExpiresAt = c.IssuedAt.Truncate(time.Second), c.ExpiresAt.Truncate(time.Second)
	return s.sign(c)
}

func (s *Signer) sign(c Claims) (string, error) {
	jc := jwtClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			ID:        c.ID.String(),
			Subject:   c.UserID.String(),
			IssuedAt:  jwt.NewNumericDate(c.IssuedAt),
			ExpiresAt: jwt.NewNumericDate(c.ExpiresAt),
		},
		EventID: c.EventID.String(),
		Cell:    c.Cell,
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jc).SignedString(s.key)
	if err != nil {
		return "", fmt.Errorf("sign admission token: %w", err)
	}
	return tok, nil
}

// Verify checks that token is validly signed, unexpired, and binds exactly
// userID, eventID and cell. Every failure is ErrInvalid.
func (s *Signer) Verify(token string, userID, eventID uuid.UUID, cell string) (Claims, error) {
	c, err := s.VerifyForRouting(token, userID, eventID)
	if err != nil {
		return Claims{}, err
	}
	if c.Cell != cell {
		return Claims{}, fmt.Errorf("%w: issued for another cell", ErrInvalid)
	}
	return c, nil
}

// VerifyForRouting is Verify for a process that serves several cells: it
// checks everything but the cell, and the caller sends the request to
// Claims.Cell (refusing a cell it does not serve). The cell is signed, so
// a buyer cannot choose it.
func (s *Signer) VerifyForRouting(token string, userID, eventID uuid.UUID) (Claims, error) {
	var jc jwtClaims
	if _, err := s.parser.ParseWithClaims(token, &jc, func(*jwt.Token) (any, error) { return s.key, nil }); err != nil {
		return Claims{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	c := Claims{Cell: jc.Cell}
	var err error
	if c.ID, err = uuid.Parse(jc.ID); err != nil {
		return Claims{}, fmt.Errorf("%w: jti", ErrInvalid)
	}
	if c.UserID, err = uuid.Parse(jc.Subject); err != nil || c.UserID != userID {
		return Claims{}, fmt.Errorf("%w: issued to another user", ErrInvalid)
	}
	if c.EventID, err = uuid.Parse(jc.EventID); err != nil || c.EventID != eventID {
		return Claims{}, fmt.Errorf("%w: issued for another event", ErrInvalid)
	}
	c.IssuedAt, c.ExpiresAt = jc.IssuedAt.Time, jc.ExpiresAt.Time
	return c, nil
}
