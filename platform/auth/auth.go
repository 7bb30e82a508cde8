// Package auth verifies and mints the bearer tokens buyers and organizers
// send: HS256 JWTs with claims sub (user UUID), exp, role (buyer |
// organizer) and, for organizers, org (organizer UUID).
package auth

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// Role is what a bearer is allowed to do.
type Role string

// The roles a bearer token can carry.
const (
	RoleBuyer     Role = "buyer"
	RoleOrganizer Role = "organizer"
	// RoleScanner is a door scanner of one organizer: it may check tickets
	// of that organizer's events in, and nothing else.
	RoleScanner Role = "scanner"
)

// ErrInvalidToken is returned for a token that is malformed, badly signed,
// expired, or missing a required claim. The reason is deliberately not
// exposed to clients.
var ErrInvalidToken = errors.New("invalid bearer token")

// Identity is the verified bearer of a request.
type Identity struct {
	UserID uuid.UUID
	Role   Role
	// OrganizerID is set for organizers and their scanners only.
	OrganizerID uuid.UUID
}

type claims struct {
	jwt.RegisteredClaims
	Role Role   `json:"role"`
	Org  string `json:"org,omitempty"`
}

// Verifier checks bearer tokens against one HS256 secret.
type Verifier struct {
	secret []byte
	parser *jwt.Parser
}

// NewVerifier returns a Verifier for secret. It panics on an empty secret,
// a programmer error: configuration is validated before this is called.
func NewVerifier(secret []byte) *Verifier {
	if len(secret) == 0 {
		panic("auth: empty secret")
	}
	return &Verifier{
		secret: secret,
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
			jwt.WithExpirationRequired(),
			jwt.WithLeeway(5*time.Second),
		),
	}
}

// Verify returns the identity a token proves. Any failure is ErrInvalidToken
// (wrapping the reason for logs, which never include the token itself).
func (v *Verifier) Verify(token string) (Identity, error) {
	id, _, err := v.VerifyUntil(token)
	return id, err
}

// VerifyUntil is Verify that also returns when the token expires (its exp
// claim; the zero time when it has none), so that a caller may remember a
// verified token until then.
func (v *Verifier) VerifyUntil(token string) (Identity, time.Time, error) {
	id, c, err := v.verify(token)
	var exp time.Time
	if err == nil && c.ExpiresAt != nil {
		exp = c.ExpiresAt.Time
	}
	return id, exp, err
}

func (v *Verifier) verify(token string) (Identity, claims, error) {
	var c claims
	if _, err := v.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.secret, nil }); err != nil {
		return Identity{}, c, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	sub, err := uuid.Parse(c.Subject)
	if err != nil {
		return Identity{}, c, fmt.Errorf("%w: sub is not a UUID", ErrInvalidToken)
	}
	id := Identity{UserID: sub, Role: c.Role}
	switch c.Role {
	case RoleBuyer:
	case RoleOrganizer, RoleScanner:
		if id.OrganizerID, err = uuid.Parse(c.Org); err != nil {
			return Identity{}, c, fmt.Errorf("%w: %s token without a UUID org", ErrInvalidToken, c.Role)
		}
	default:
		return Identity{}, c, fmt.Errorf("%w: unknown role", ErrInvalidToken)
	}
	return id, c, nil
}

// Mint signs a token for id that expires after ttl. Production tokens come
// from an identity provider; this serves `boxoffice token`, dev and tests.
func Mint(secret []byte, id Identity, ttl time.Duration) (string, error) {
	now := time.Now()
	c := claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   id.UserID.String(),
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
		Role: id.Role,
	}
	if id.Role == RoleOrganizer || id.Role == RoleScanner {
		c.Org = id.OrganizerID.String()
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return s, nil
}

type ctxKey struct{}

// WithIdentity returns a context carrying id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// FromContext returns the identity stored by WithIdentity.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(Identity)
	return id, ok
}
