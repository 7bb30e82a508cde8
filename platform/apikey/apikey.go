// Package apikey issues, lists, revokes and verifies organizer API keys:
// long-lived credentials an organizer's own systems present as
// `Authorization: Bearer bo_live_…` instead of a short-lived JWT.
//
// A key is "bo_live_" followed by the unpadded base64url of 64 bytes: the
// key's id (16 bytes), its organizer's id (16 bytes, so that the key can be
// checked in the organizer's purchase cell without asking every cell) and a
// 32-byte secret from crypto/rand. Only SHA-256 of the secret is stored. A
// slow password hash (bcrypt, argon2) protects secrets people choose,
// which are guessable; 256 random bits are not, so a stolen hash cannot be
// turned back into a key however fast the hash, and a fast hash keeps
// checking a key on every request cheap.
//
// Nothing caches a verified key: every request that presents one reads its
// row, so a key revoked by one request is refused by the next one, in every
// process.
//
// It owns, as its one writer, the api_keys table; a key's organizer row
// it ensures through platform/organizer, in the key's transaction.
package apikey

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"boxoffice/platform/auth"
	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/platform/organizer"
	"boxoffice/platform/sliceutil"
	"boxoffice/sqlcgen"
)

// Prefix starts every API key, so that a key is told from a JWT at a
// glance (and by secret scanners).
const Prefix = "bo_live_"

// DisplayLen is how many leading characters of a key its Prefix field
// shows: "bo_live_" and eight characters of the key's id. Not a secret.
const DisplayLen = len(Prefix) + 8

// MaxActive is how many keys that are not revoked one organizer may have.
const MaxActive = 25

// maxListed bounds a listing, revoked keys included.
const maxListed = 500

// touchEvery is how stale a key's last use may be before a request that
// presents it records the use again (the query's own guard agrees).
const touchEvery = time.Minute

// The errors of the Store.
var (
	// ErrNotFound is returned for a key that does not exist or is
	// another organizer's.
	ErrNotFound = fault.New(fault.CodeNotFound, "api key not found")
	// ErrLimit is returned by Create when the organizer has MaxActive
	// keys that are not revoked.
	ErrLimit = fault.New(fault.CodeConflict, "api key limit reached")
)

const (
	idLen     = 16
	secretLen = 32
	rawLen    = 2*idLen + secretLen
	// encodedLen is the length of a whole key.
	encodedLen = len(Prefix) + (rawLen*8+5)/6
)

// Key is an API key as listings show it: never its secret.
type Key struct {
	ID          uuid.UUID
	OrganizerID uuid.UUID
	Name        string
	// Prefix is the first DisplayLen characters of the key.
	Prefix    string
	CreatedAt time.Time
	// LastUsedAt is when a request last presented the key, to the minute;
	// nil if none has.
	LastUsedAt *time.Time
	// RevokedAt is when the key was revoked; nil while it is valid.
	RevokedAt *time.Time
}

// IsKey reports whether token has the form of an API key rather than of
// a JWT. It says nothing of its validity.
func IsKey(token string) bool { return strings.HasPrefix(token, "bo_") }

// parsed is a key taken apart.
type parsed struct {
	id, organizerID uuid.UUID
	secret          []byte
}

func parse(key string) (parsed, bool) {
	if len(key) != encodedLen || !strings.HasPrefix(key, Prefix) {
		return parsed{}, false
	}
	// Strict: the unused low bits of the last character must be zero, so
	// that a key has one spelling (a lenient decoder accepts four).
	raw, err := base64.RawURLEncoding.Strict().DecodeString(key[len(Prefix):])
	if err != nil || len(raw) != rawLen {
		return parsed{}, false
	}
	var p parsed
	copy(p.id[:], raw[:idLen])
	copy(p.organizerID[:], raw[idLen:2*idLen])
	p.secret = raw[2*idLen:]
	return p, true
}

// Organizer returns the organizer a well-formed key claims to belong to,
// so that the caller can find the organizer's purchase cell; Verify then
// checks the claim.
func Organizer(key string) (uuid.UUID, bool) {
	p, ok := parse(key)
	return p.organizerID, ok
}

func hash(secret []byte) []byte {
	h := sha256.Sum256(secret)
	return h[:]
}

// Store keeps the API keys of the organizers of one purchase cell. It is
// safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	q    *sqlcgen.Queries
}

// NewStore returns the Store on pool.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, q: sqlcgen.New()}
}

// Create issues a key named name for organizerID and returns it with the
// whole key: the only time the key exists outside the caller's hands, as
// only its hash is stored. Returns ErrLimit if the organizer has
// MaxActive keys that are not revoked.
func (s *Store) Create(ctx context.Context, organizerID uuid.UUID, name string) (Key, string, error) {
	return s.create(ctx, s.pool, organizerID, name)
}

// CreateTx is Create in the caller's transaction tx (as a savepoint of
// it): the key is valid once tx commits.
func (s *Store) CreateTx(ctx context.Context, tx pgx.Tx, organizerID uuid.UUID, name string) (Key, string, error) {
	return s.create(ctx, tx, organizerID, name)
}

func (s *Store) create(ctx context.Context, on db.Executor, organizerID uuid.UUID, name string) (Key, string, error) {
	raw := make([]byte, rawLen)
	id := uuid.New()
	copy(raw, id[:])
	copy(raw[idLen:], organizerID[:])
	// crypto/rand.Read never fails (it panics rather than return short).
	_, _ = rand.Read(raw[2*idLen:])
	key := Prefix + base64.RawURLEncoding.EncodeToString(raw)
	row, err := db.WithTxV(ctx, on, func(ctx context.Context, tx pgx.Tx) (sqlcgen.APIKeyInsertRow, error) {
		if err := s.q.APIKeyLockOrganizer(ctx, tx, organizerID); err != nil {
			return sqlcgen.APIKeyInsertRow{}, fmt.Errorf("lock organizer's api keys: %w", err)
		}
		n, err := s.q.APIKeyCountActive(ctx, tx, organizerID)
		if err != nil {
			return sqlcgen.APIKeyInsertRow{}, fmt.Errorf("count api keys: %w", err)
		}
		if n >= MaxActive {
			return sqlcgen.APIKeyInsertRow{}, ErrLimit
		}
		// The organizer's row pins it to this cell (cells.Router).
		if err := organizer.Ensure(ctx, tx, organizerID); err != nil {
			return sqlcgen.APIKeyInsertRow{}, fmt.Errorf("ensure organizer: %w", err)
		}
		return s.q.APIKeyInsert(ctx, tx, sqlcgen.APIKeyInsertParams{
			ID: id, OrganizerID: organizerID, Name: name, Prefix: key[:DisplayLen], SecretHash: hash(raw[2*idLen:]),
		})
	})
	if err != nil {
		return Key{}, "", fmt.Errorf("create api key: %w", err)
	}
	return Key(row), key, nil
}

// List returns the organizer's keys, revoked ones included, oldest first
// (at most 500).
func (s *Store) List(ctx context.Context, organizerID uuid.UUID) ([]Key, error) {
	rows, err := s.q.APIKeyList(ctx, s.pool, sqlcgen.APIKeyListParams{OrganizerID: organizerID, MaxRows: maxListed})
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return sliceutil.Map(rows, func(r sqlcgen.APIKeyListRow) Key { return Key(r) }), nil
}

// Revoke revokes the organizer's key id: from the moment it returns, every
// request that presents the key is refused. Revoking a revoked key is a
// no-op that returns it. Returns ErrNotFound for a key that does not exist
// or is another organizer's.
func (s *Store) Revoke(ctx context.Context, organizerID, id uuid.UUID) (Key, error) {
	row, err := s.q.APIKeyRevoke(ctx, s.pool, sqlcgen.APIKeyRevokeParams{ID: id, OrganizerID: organizerID})
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, ErrNotFound
	}
	if err != nil {
		return Key{}, fmt.Errorf("revoke api key: %w", err)
	}
	return Key(row), nil
}

// Verify returns the identity key proves: the organizer's (RoleOrganizer,
// never a buyer or a scanner), with APIKeyID set and UserID the key's id.
// A key that is malformed, unknown, revoked, or whose secret or organizer
// does not match is auth.ErrInvalidToken; any other error is the
// database's (the caller answers it as unavailable, not as a refusal).
// The key itself is never part of an error.
func (s *Store) Verify(ctx context.Context, key string) (auth.Identity, error) {
	p, ok := parse(key)
	if !ok {
		return auth.Identity{}, fmt.Errorf("%w: malformed api key", auth.ErrInvalidToken)
	}
	row, err := s.q.APIKeyGetForAuth(ctx, s.pool, p.id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return auth.Identity{}, fmt.Errorf("%w: unknown api key", auth.ErrInvalidToken)
	case err != nil:
		return auth.Identity{}, fmt.Errorf("read api key: %w", err)
	}
	// The hash is compared even for a key of another organizer, so that
	// timing tells nothing.
	secretOK := subtle.ConstantTimeCompare(hash(p.secret), row.SecretHash) == 1
	switch {
	case !secretOK || row.OrganizerID != p.organizerID:
		return auth.Identity{}, fmt.Errorf("%w: api key secret does not match", auth.ErrInvalidToken)
	case row.RevokedAt != nil:
		return auth.Identity{}, fmt.Errorf("%w: api key revoked", auth.ErrInvalidToken)
	}
	if row.LastUsedAt == nil || time.Since(*row.LastUsedAt) > touchEvery {
		// Advisory: a failed record of use (a fenced region refuses
		// writes) does not refuse a valid key.
		_ = s.q.APIKeyTouch(ctx, s.pool, p.id)
	}
	return auth.Identity{UserID: p.id, Role: auth.RoleOrganizer, OrganizerID: p.organizerID, APIKeyID: p.id}, nil
}
