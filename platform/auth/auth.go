// Package auth verifies and mints the bearer tokens buyers and organizers
// send.
//
// A Verifier accepts JWTs of two kinds, each with a fixed list of
// algorithms chosen by the token's header before anything else is read:
//
//   - tokens of the deployment's identity provider, signed with RS256,
//     ES256 (P-256) or EdDSA (Ed25519) by a key of its JWKS
//     (VerifierConfig.JWKSURL), named by the header's kid. The key's type
//     must be the algorithm's: an RSA key never verifies an ES256 token,
//     and no public key ever serves as an HMAC secret. The issuer (iss)
//     and audience (aud) must be the configured ones.
//   - HS256 tokens of VerifierConfig.Secret (Mint), for development and
//     tests, only when a secret is configured.
//
// Anything else, "alg": "none" included, is refused. Every accepted token
// carries sub (a UUID), exp, role (buyer, organizer or scanner) and, for
// organizers and scanners, org (the organizer's UUID): an identity
// provider must issue the claims "role" and "org" under these names.
//
// The times are read strictly: exp, and iat and nbf when present, must be
// JSON numbers (a quoted "9999999999" is refused), the token must have been
// issued (iat) and be valid (nbf) by now and not have expired (exp), each
// within ClockSkew.
package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"golang.org/x/time/rate"
)

// Role is what a bearer is allowed to do.
type Role string

// The roles a bearer token can carry.
const (
	RoleBuyer     Role = "buyer"
	RoleOrganizer Role = "organizer"
	// RoleScanner is a door scanner of one organizer: it may check tickets
	// of that organizer's events in, count their check-ins and read their
	// revocation lists, and nothing else.
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
	// APIKeyID is the organizer API key the request presented (package
	// apikey; UserID is then the key's id too); uuid.Nil for a JWT.
	APIKeyID uuid.UUID
}

// The algorithms a Verifier accepts.
const (
	algHS256 = "HS256"
	algRS256 = "RS256"
	algES256 = "ES256"
	algEdDSA = "EdDSA"
)

// minRSABits is the smallest RSA modulus a JWKS key may have.
const minRSABits = 2048

// ClockSkew is how far the clock of a token's issuer may be from ours:
// a token is still accepted this long after its exp, and this long before
// its iat or nbf. An identity provider's clock and ours are each kept to
// well under a second by NTP; 30 seconds absorbs a host whose sync lapsed
// for a while without making an expired token useful for long.
const ClockSkew = 30 * time.Second

// Verifier checks bearer tokens (see the package doc). It is safe for
// concurrent use.
type Verifier struct {
	secret []byte
	hs     *jwt.Parser
	// jwks is nil without a JWKS URL.
	jwks keyfunc.Keyfunc
	asym *jwt.Parser
}

// VerifierConfig configures New.
type VerifierConfig struct {
	// Secret verifies HS256 tokens (Mint): for development and tests.
	// Defaults to none: HS256 tokens are refused. At least 32 bytes when
	// set.
	Secret []byte
	// JWKSURL is the identity provider's JWK Set. Defaults to none: only
	// HS256 tokens are accepted, and Secret is required.
	JWKSURL string
	// Issuer is the iss every JWKS token must carry. Required with
	// JWKSURL.
	Issuer string
	// Audience must be among the aud of every JWKS token. Required with
	// JWKSURL.
	Audience string
	// HTTPClient fetches the JWK Set. Defaults to a client with a 10s
	// timeout.
	HTTPClient *http.Client
	// RefreshInterval is how often the JWK Set is fetched again in the
	// background, so that a key the provider withdrew stops verifying.
	// Defaults to 1h.
	RefreshInterval time.Duration
	// UnknownKIDInterval is the least time between two fetches caused by
	// a token whose kid is not in the cached set: a key rotated in is
	// picked up by the first token that uses it, and tokens with forged
	// kids cause at most one fetch per interval (the others are refused
	// without waiting). Defaults to 1m.
	UnknownKIDInterval time.Duration
	// Logger logs failed refreshes of the JWK Set. Required with JWKSURL.
	Logger *slog.Logger
}

// NewVerifier returns a Verifier of HS256 tokens signed with secret. It
// panics on an empty secret, a programmer error: configuration is
// validated before this is called.
func NewVerifier(secret []byte) *Verifier {
	if len(secret) == 0 {
		panic("auth: empty secret")
	}
	return &Verifier{secret: secret, hs: hsParser()}
}

func hsParser() *jwt.Parser {
	return newParser(jwt.WithValidMethods([]string{algHS256}))
}

// newParser is the parser of one kind of token: opts (its algorithms,
// issuer, audience) plus the checks every bearer token gets. Claims are
// decoded into jwt.MapClaims, whose date getters accept only JSON numbers:
// jwt.RegisteredClaims decodes its dates through json.Number, which
// encoding/json also fills from a quoted number, so `"exp": "9999999999"`
// would pass as a date there (and jwt.WithJSONNumber does not change that).
func newParser(opts ...jwt.ParserOption) *jwt.Parser {
	return jwt.NewParser(append(opts,
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(ClockSkew),
	)...)
}

// New returns the Verifier cfg describes. With a JWKS URL it fetches the
// JWK Set before returning (an error if that fails: a deployment that
// cannot verify its buyers does not start) and then keeps it fresh in the
// background until ctx is done.
func New(ctx context.Context, cfg VerifierConfig) (*Verifier, error) {
	if cfg.JWKSURL == "" {
		if len(cfg.Secret) == 0 {
			return nil, errors.New("auth: a JWKS URL or an HS256 secret is required")
		}
		return NewVerifier(cfg.Secret), nil
	}
	switch {
	case cfg.Issuer == "" || cfg.Audience == "":
		return nil, errors.New("auth: an issuer and an audience are required with a JWKS URL")
	case cfg.Logger == nil:
		return nil, errors.New("auth: a logger is required with a JWKS URL")
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = time.Hour
	}
	if cfg.UnknownKIDInterval <= 0 {
		cfg.UnknownKIDInterval = time.Minute
	}
	logger := cfg.Logger.With("component", "jwks")
	noErrorFirst := false
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKSURL}, keyfunc.Override{
		Client:                    client,
		NoErrorReturnFirstHTTPReq: &noErrorFirst,
		RefreshInterval:           cfg.RefreshInterval,
		// One fetch per interval for unknown kids. A token that finds
		// the allowance spent waits at most this long for it (the wait
		// also bounds the fetch), so a flood of forged kids is refused
		// at once rather than queued.
		RefreshUnknownKID: rate.NewLimiter(rate.Every(cfg.UnknownKIDInterval), 1),
		RateLimitWaitMax:  5 * time.Second,
		RefreshErrorHandlerFunc: func(string) func(context.Context, error) {
			return func(ctx context.Context, err error) {
				logger.WarnContext(ctx, "refresh JWK Set", "error", err.Error())
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("auth: fetch JWK Set: %w", err)
	}
	v := &Verifier{
		jwks: kf,
		asym: newParser(
			jwt.WithValidMethods([]string{algRS256, algES256, algEdDSA}),
			jwt.WithIssuer(cfg.Issuer),
			jwt.WithAudience(cfg.Audience),
		),
	}
	if len(cfg.Secret) > 0 {
		v.secret, v.hs = cfg.Secret, hsParser()
	}
	return v, nil
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
	if err != nil {
		return id, time.Time{}, err
	}
	var exp time.Time
	if e, _ := c.GetExpirationTime(); e != nil {
		exp = e.Time
	}
	return id, exp, nil
}

// headerAlg is the alg of token's header, read before anything is
// verified to choose the one parser that may look at the token.
func headerAlg(token string) (string, error) {
	head, _, ok := strings.Cut(token, ".")
	if !ok {
		return "", errors.New("not a JWS")
	}
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return "", errors.New("header is not base64url")
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return "", errors.New("header is not JSON")
	}
	return h.Alg, nil
}

// jwksKey is the key of the JWK Set that verifies t: the one its kid
// names, when that key's type is the one of t's algorithm.
func (v *Verifier) jwksKey(t *jwt.Token) (any, error) {
	if kid, _ := t.Header["kid"].(string); kid == "" {
		return nil, errors.New("no kid in header")
	}
	key, err := v.jwks.Keyfunc(t)
	if err != nil {
		return nil, err
	}
	alg := t.Method.Alg()
	switch k := key.(type) {
	case *rsa.PublicKey:
		if alg == algRS256 && k.N.BitLen() >= minRSABits {
			return k, nil
		}
	case *ecdsa.PublicKey:
		if alg == algES256 && k.Curve == elliptic.P256() {
			return k, nil
		}
	case ed25519.PublicKey:
		if alg == algEdDSA {
			return k, nil
		}
	}
	return nil, fmt.Errorf("the kid's key is not a key of %s", alg)
}

func (v *Verifier) verify(token string) (Identity, jwt.MapClaims, error) {
	c := jwt.MapClaims{}
	alg, err := headerAlg(token)
	if err != nil {
		return Identity{}, c, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	switch {
	case alg == algHS256 && v.hs != nil:
		_, err = v.hs.ParseWithClaims(token, c, func(*jwt.Token) (any, error) { return v.secret, nil })
	case (alg == algRS256 || alg == algES256 || alg == algEdDSA) && v.jwks != nil:
		_, err = v.asym.ParseWithClaims(token, c, v.jwksKey)
	default:
		err = fmt.Errorf("alg %q is not accepted", alg)
	}
	if err != nil {
		return Identity{}, c, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	// A claim of another JSON type than string reads as "", which no
	// check below accepts.
	subject, _ := c["sub"].(string)
	role, _ := c["role"].(string)
	org, _ := c["org"].(string)
	sub, err := uuid.Parse(subject)
	if err != nil {
		return Identity{}, c, fmt.Errorf("%w: sub is not a UUID", ErrInvalidToken)
	}
	id := Identity{UserID: sub, Role: Role(role)}
	switch id.Role {
	case RoleBuyer:
	case RoleOrganizer, RoleScanner:
		if id.OrganizerID, err = uuid.Parse(org); err != nil {
			return Identity{}, c, fmt.Errorf("%w: %s token without a UUID org", ErrInvalidToken, id.Role)
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
	c := jwt.MapClaims{
		"sub":  id.UserID.String(),
		"iat":  jwt.NewNumericDate(now),
		"exp":  jwt.NewNumericDate(now.Add(ttl)),
		"role": string(id.Role),
	}
	if id.Role == RoleOrganizer || id.Role == RoleScanner {
		c["org"] = id.OrganizerID.String()
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
