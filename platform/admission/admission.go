// Package admission issues and verifies admission tokens: short-lived,
// signed proof that a buyer was let through the waiting room for one event
// in one purchase cell. A token proves admission, not that a seat is free,
// and it is reusable until it expires, so a buyer retrying a hold with the
// same Idempotency-Key is never turned away.
//
// Tokens are JWTs signed with Ed25519 ("alg": "EdDSA") and carry the kid
// of their key (its RFC 7638 thumbprint). The public keys are published
// as a JWK Set (Signer.JWKS), so that an edge worker or CDN can verify a
// token with a Verifier built from that set alone, holding no secret.
// HS256 tokens of a legacy shared key (SignerConfig.Key) keep verifying
// while that key is configured, for the admissions issued before a
// deployment moved to Ed25519.
package admission

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"boxoffice/platform/verified"
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

// jwtClaims is how a Signer writes Claims. Verifiers read them as
// jwt.MapClaims instead (see claims).
type jwtClaims struct {
	jwt.RegisteredClaims
	EventID string `json:"event_id"`
	Cell    string `json:"cell"`
}

// Verifier verifies admission tokens with public keys only (and, during
// a migration, a legacy HS256 key). It is safe for concurrent use.
type Verifier struct {
	keys   map[string]ed25519.PublicKey
	legacy []byte
	parser *jwt.Parser
	now    func() time.Time

	// verified remembers the tokens that verified until each one's
	// expiry (package verified): a buyer's holds and retries with one
	// admission pay for the Ed25519 verification (about a fifth of an API
	// process's CPU per hold, measured) once per process.
	verified *verified.Cache[Claims]
}

// NewVerifier returns a Verifier of the tokens signed by the private
// halves of keys, which must be Ed25519 keys.
func NewVerifier(keys ...ed25519.PublicKey) *Verifier {
	return newVerifier(keys, nil)
}

func newVerifier(keys []ed25519.PublicKey, legacy []byte) *Verifier {
	v := &Verifier{keys: make(map[string]ed25519.PublicKey, len(keys)), legacy: legacy, now: time.Now, verified: verified.New[Claims]()}
	for _, k := range keys {
		v.keys[KeyID(k)] = k
	}
	methods := []string{jwt.SigningMethodEdDSA.Alg()}
	if len(legacy) > 0 {
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	v.parser = jwt.NewParser(jwt.WithValidMethods(methods), jwt.WithExpirationRequired(), jwt.WithIssuedAt(),
		jwt.WithTimeFunc(func() time.Time { return v.now() }))
	return v
}

// NewVerifierFromJWKS returns a Verifier of the Ed25519 keys of a JWK Set
// such as Signer.JWKS returns (what GET /v1/admission-keys serves). A set
// with no Ed25519 key is an error; keys of other types are ignored.
func NewVerifierFromJWKS(raw []byte) (*Verifier, error) {
	var set jwkset.JWKSMarshal
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("admission: decode JWK Set: %w", err)
	}
	jwks, err := set.JWKSlice()
	if err != nil {
		return nil, fmt.Errorf("admission: read JWK Set: %w", err)
	}
	var keys []ed25519.PublicKey
	for _, j := range jwks {
		if k, ok := j.Key().(ed25519.PublicKey); ok {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("admission: the JWK Set has no Ed25519 key")
	}
	return NewVerifier(keys...), nil
}

// KeyID is the kid of an Ed25519 public key: its RFC 7638 JWK thumbprint
// (SHA-256, unpadded base64url).
func KeyID(pub ed25519.PublicKey) string {
	canonical := `{"crv":"Ed25519","kty":"OKP","x":"` + base64.RawURLEncoding.EncodeToString(pub) + `"}`
	sum := sha256.Sum256([]byte(canonical))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// ParseSigningKey reads an Ed25519 private key written as a PEM PKCS #8
// block ("BEGIN PRIVATE KEY", as `openssl genpkey -algorithm ed25519`
// writes), or as the standard base64 of its 32-byte seed or 64-byte
// private key.
func ParseSigningKey(s string) (ed25519.PrivateKey, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "-----BEGIN") {
		block, _ := pem.Decode([]byte(s))
		if block == nil {
			return nil, errors.New("not a PEM block")
		}
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse PKCS #8 key: %w", err)
		}
		ed, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, errors.New("the PEM key is not an Ed25519 key")
		}
		return ed, nil
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("neither PEM nor base64")
	}
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case ed25519.PrivateKeySize:
		k := ed25519.NewKeyFromSeed(raw[:ed25519.SeedSize])
		if !k.Equal(ed25519.PrivateKey(raw)) {
			return nil, errors.New("the 64-byte key's public half does not match its seed")
		}
		return k, nil
	}
	return nil, errors.New("base64 of 32 or 64 bytes expected")
}

// Signer issues and verifies admission tokens with one Ed25519 key.
type Signer struct {
	*Verifier
	key ed25519.PrivateKey
	kid string
	ttl time.Duration
	now func() time.Time
}

// DefaultTTL is how long a token admits its buyer when SignerConfig leaves
// TTL zero (and the default of BOXOFFICE_ADMISSION_TTL).
const DefaultTTL = 15 * time.Minute

// SignerConfig configures NewSigner.
type SignerConfig struct {
	// SigningKey signs tokens. Defaults to the key derived from Key:
	// one of the two is required.
	SigningKey ed25519.PrivateKey
	// Key is the legacy HS256 key: tokens it signed keep verifying while
	// it is set, and without a SigningKey the Ed25519 key is derived from
	// it (HMAC-SHA256 of a fixed label), so that a deployment configured
	// with Key alone moves to Ed25519 without a new secret. Defaults to
	// none: HS256 tokens are refused.
	Key []byte
	// TTL is how long a token admits its buyer. Defaults to DefaultTTL.
	TTL time.Duration
}

// derivedKeyLabel is what DeriveSigningKey authenticates with the legacy
// key: changing it changes every derived key.
const derivedKeyLabel = "boxoffice admission Ed25519 signing key v1"

// DeriveSigningKey is the Ed25519 key NewSigner uses for a legacy HS256
// key when no SigningKey is given.
func DeriveSigningKey(legacy []byte) ed25519.PrivateKey {
	m := hmac.New(sha256.New, legacy)
	m.Write([]byte(derivedKeyLabel))
	return ed25519.NewKeyFromSeed(m.Sum(nil))
}

// NewSigner returns a Signer. It panics without a SigningKey or a Key, a
// programmer error: configuration is validated before this is called.
func NewSigner(cfg SignerConfig) *Signer {
	if len(cfg.SigningKey) == 0 {
		if len(cfg.Key) == 0 {
			panic("admission: no signing key")
		}
		cfg.SigningKey = DeriveSigningKey(cfg.Key)
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	pub := cfg.SigningKey.Public().(ed25519.PublicKey)
	return &Signer{
		Verifier: newVerifier([]ed25519.PublicKey{pub}, cfg.Key),
		key:      cfg.SigningKey,
		kid:      KeyID(pub),
		ttl:      cfg.TTL,
		now:      time.Now,
	}
}

// PublicKey is the key the Signer's tokens verify with.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// JWKS is the JWK Set of the Signer's public key (kty OKP, crv Ed25519,
// alg EdDSA, use sig, kid): what an edge verifier needs, and nothing
// secret.
func (s *Signer) JWKS() JWKS {
	return JWKS{Keys: []JWK{{
		KeyType: "OKP", Curve: "Ed25519", Algorithm: "EdDSA", Use: "sig", KeyID: s.kid,
		X: base64.RawURLEncoding.EncodeToString(s.PublicKey()),
	}}}
}

// JWKS is a JWK Set (RFC 7517) of Ed25519 public keys.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// JWK is one Ed25519 public key (RFC 8037).
type JWK struct {
	KeyType   string `json:"kty"`
	Curve     string `json:"crv"`
	Algorithm string `json:"alg"`
	Use       string `json:"use"`
	KeyID     string `json:"kid"`
	X         string `json:"x"`
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
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jc)
	t.Header["kid"] = s.kid
	tok, err := t.SignedString(s.key)
	if err != nil {
		return "", fmt.Errorf("sign admission token: %w", err)
	}
	return tok, nil
}

// Verify checks that token is validly signed, unexpired, and binds exactly
// userID, eventID and cell. Every failure is ErrInvalid.
func (v *Verifier) Verify(token string, userID, eventID uuid.UUID, cell string) (Claims, error) {
	c, err := v.VerifyForRouting(token, userID, eventID)
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
func (v *Verifier) VerifyForRouting(token string, userID, eventID uuid.UUID) (Claims, error) {
	c, err := v.claims(token)
	if err != nil {
		return Claims{}, err
	}
	if c.UserID != userID {
		return Claims{}, fmt.Errorf("%w: issued to another user", ErrInvalid)
	}
	if c.EventID != eventID {
		return Claims{}, fmt.Errorf("%w: issued for another event", ErrInvalid)
	}
	return c, nil
}

// claims returns what token binds once its signature, algorithm, expiry
// and ids check out: remembered (verified) until it expires.
//
// The claims are decoded as jwt.MapClaims, whose date getters accept only
// JSON numbers: jwt.RegisteredClaims would read a quoted
// `"exp": "9999999999"` as a date (it decodes through json.Number, which
// encoding/json also fills from a string).
func (v *Verifier) claims(token string) (Claims, error) {
	if c, ok := v.verified.Get(token, v.now()); ok {
		return c, nil
	}
	m := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(token, m, v.keyFor); err != nil {
		return Claims{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var c Claims
	var err error
	if c.ID, err = uuidClaim(m, "jti"); err != nil {
		return Claims{}, err
	}
	if c.UserID, err = uuidClaim(m, "sub"); err != nil {
		return Claims{}, err
	}
	if c.EventID, err = uuidClaim(m, "event_id"); err != nil {
		return Claims{}, err
	}
	var ok bool
	if c.Cell, ok = m["cell"].(string); !ok {
		return Claims{}, fmt.Errorf("%w: cell", ErrInvalid)
	}
	// The parser checked both dates are numbers, and that exp is there.
	iat, _ := m.GetIssuedAt()
	exp, _ := m.GetExpirationTime()
	if iat == nil {
		return Claims{}, fmt.Errorf("%w: iat", ErrInvalid)
	}
	c.IssuedAt, c.ExpiresAt = iat.Time, exp.Time
	v.verified.Put(token, c, c.ExpiresAt)
	return c, nil
}

// uuidClaim is the claim name of m, which must be a string holding a UUID.
func uuidClaim(m jwt.MapClaims, name string) (uuid.UUID, error) {
	s, _ := m[name].(string)
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fmt.Errorf("%w: %s", ErrInvalid, name)
	}
	return id, nil
}

// keyFor is the key that verifies t: the Ed25519 key its kid names, or the
// legacy HS256 key. The parser admits no other algorithm, and each key
// serves its own algorithm only.
func (v *Verifier) keyFor(t *jwt.Token) (any, error) {
	switch t.Method.Alg() {
	case jwt.SigningMethodEdDSA.Alg():
		kid, _ := t.Header["kid"].(string)
		if k, ok := v.keys[kid]; ok {
			return k, nil
		}
		return nil, errors.New("unknown kid")
	case jwt.SigningMethodHS256.Alg():
		if len(v.legacy) > 0 {
			return v.legacy, nil
		}
	}
	return nil, fmt.Errorf("alg %s is not accepted", t.Method.Alg())
}
