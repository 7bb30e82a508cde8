package roles

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"boxoffice/domain/payments"
	"boxoffice/domain/payments/sandbox"
	"boxoffice/domain/webhooks"
	"boxoffice/platform/admission"
	"boxoffice/platform/auth"
	"boxoffice/platform/bus"
	"boxoffice/platform/db"
	"boxoffice/platform/telemetry"
)

// Config is the process configuration, read once from the environment.
type Config struct {
	DatabaseURL string
	DBMaxConns  int32
	// DBStatementTimeout and DBLockTimeout bound every statement of the
	// roles' pools (serve, relay, work): DATABASE_STATEMENT_TIMEOUT,
	// default 30s, and DATABASE_LOCK_TIMEOUT, default 10s; 0 turns one off.
	DBStatementTimeout, DBLockTimeout time.Duration
	HTTPAddr                          string
	// JWTSecret verifies HS256 bearer tokens (BOXOFFICE_JWT_SECRET): for
	// development and tests; required by serve without a JWKS URL.
	JWTSecret []byte
	// JWKSURL is the identity provider's JWK Set (BOXOFFICE_JWKS_URL):
	// bearer tokens signed with RS256, ES256 or EdDSA by its keys, with
	// the issuer JWTIssuer (BOXOFFICE_JWT_ISSUER) and the audience
	// JWTAudience (BOXOFFICE_JWT_AUDIENCE), both required with it.
	JWKSURL, JWTIssuer, JWTAudience string
	// AdmissionSigningKey signs admission tokens
	// (BOXOFFICE_ADMISSION_SIGNING_KEY: a PEM PKCS #8 Ed25519 key, or the
	// base64 of its 32-byte seed). Without it the key is derived from
	// AdmissionKey.
	AdmissionSigningKey ed25519.PrivateKey
	// AdmissionKey is the legacy HS256 admission key
	// (BOXOFFICE_ADMISSION_KEY): tokens it signed keep verifying while it
	// is set. serve requires it or AdmissionSigningKey.
	AdmissionKey []byte
	// bearer is the bearer verifier openBearer built (serve, dev); nil,
	// NewAPI verifies HS256 tokens of JWTSecret.
	bearer *auth.Verifier
	// AdmissionTTL is how long an admission token admits its buyer to
	// hold seats (BOXOFFICE_ADMISSION_TTL, default 15m, 1m to 24h). A
	// hold retried with its Idempotency-Key is answered after it too.
	AdmissionTTL time.Duration
	HoldTTL      time.Duration
	// WaitlistOfferTTL is how long a waitlist offer reserves its seats
	// for its buyer (BOXOFFICE_WAITLIST_OFFER_TTL, default 10m).
	WaitlistOfferTTL time.Duration
	// InboxRetention and StripeEventRetention are how long the retention
	// worker keeps inbox rows and Stripe event ids
	// (BOXOFFICE_INBOX_RETENTION, default 35 days, at least 31;
	// BOXOFFICE_STRIPE_EVENT_RETENTION, default 30 days, at least 3).
	InboxRetention, StripeEventRetention time.Duration
	// ReconcileInterval is how often `work` reconciles the provider's
	// last day of intents with the orders, one process of the cell at a
	// time (BOXOFFICE_RECONCILE_INTERVAL, default 15m, at least 1m).
	ReconcileInterval time.Duration
	// PaymentGrace is how much longer, at most, a hold is kept while its
	// payment is being confirmed (BOXOFFICE_PAYMENT_GRACE, default 5m,
	// at most 15m; 0 turns it off).
	PaymentGrace time.Duration
	// Cell is the purchase cell a relay or worker process serves
	// (BOXOFFICE_CELL, default "default"): DATABASE_URL is that cell's
	// database, and its events are on the cell's bus namespace.
	Cell string
	// Cells are the purchase cells an API process serves: BOXOFFICE_CELLS
	// lists their names, and BOXOFFICE_CELL_<NAME>_DATABASE_URL gives each
	// its database (NAME upper-cased, "-" as "_"). Unset, the one cell is
	// Cell on DATABASE_URL.
	Cells    []cellConfig
	LogLevel slog.Level
	NATSURL  string
	// NATSCreds is a NATS credentials file (a user JWT and its nkey seed;
	// NATS_CREDS), for servers that use decentralised auth. A user and
	// password go in NATS_URL instead (nats://user:password@host:4222).
	NATSCreds string
	Streams   bus.Config
	OpsAddr   string
	// StripeWebhookSecret verifies provider webhooks (and signs the
	// sandbox's); unset, the API's webhook route answers 404.
	StripeWebhookSecret string
	// Payments is the provider (BOXOFFICE_PAYMENTS): "stripe" or
	// "sandbox", whose routes let buyers authorize their own payments.
	// Defaults to stripe, which then needs STRIPE_SECRET_KEY: the sandbox
	// runs only when named (dev names it).
	Payments        string
	StripeSecretKey string
	StripeAPIBase   string
	// SandboxWebhookURL is where the sandbox sends its webhooks: the API's
	// /v1/webhooks/stripe.
	SandboxWebhookURL string
	// TicketSeed is the Ed25519 seed tickets are signed with.
	TicketSeed []byte
	// RegionEpoch is the region epoch this process writes under
	// (BOXOFFICE_REGION_EPOCH, default 1): once `boxoffice fence` raises
	// the database's epoch past it, every write of this process is refused.
	RegionEpoch int64
	// Webhooks configures outbound webhooks (BOXOFFICE_WEBHOOK_*).
	Webhooks webhookConfig
	// RedisURL is the waiting room's Redis; unset, the waiting room is
	// in-process (one API process only).
	RedisURL string
	// AdmissionRate is the release controller's initial R, admissions per
	// second; AdmissionRateMax its ceiling.
	AdmissionRate, AdmissionRateMax float64
	// WaitingRoomIPLimit is waiting-room requests per second per client
	// address and event; -1 disables it (behind a proxy that limits).
	WaitingRoomIPLimit int
	// HoldRateLimit is holds per second per buyer, in bursts of twice as
	// many (BOXOFFICE_HOLD_RATE_LIMIT, default 5); -1 disables it.
	HoldRateLimit int
	// EventReadIPLimit is event and seat-map reads per second per client
	// address (BOXOFFICE_EVENT_READ_IP_LIMIT, default 200); -1 disables it
	// (behind a proxy that limits).
	EventReadIPLimit int
	// CORSOrigins are the origins whose browser pages may call the API
	// (BOXOFFICE_CORS_ORIGINS, comma-separated scheme://host[:port];
	// default none: no CORS).
	CORSOrigins []string
}

// cellConfig is one purchase cell an API process serves.
type cellConfig struct {
	Name        string
	DatabaseURL string
	// Organizers dedicate the cell to them
	// (BOXOFFICE_CELL_<NAME>_ORGANIZERS, cells.Cell.Organizers). Defaults
	// to none: the cell is shared.
	Organizers []uuid.UUID
}

// cellURLVar is the variable that holds the named cell's database URL.
func cellURLVar(name string) string { return cellVar(name, "DATABASE_URL") }

// cellOrganizersVar is the variable that dedicates the named cell to
// organizers.
func cellOrganizersVar(name string) string { return cellVar(name, "ORGANIZERS") }

// cellVar is the named cell's variable BOXOFFICE_CELL_<NAME>_<suffix>.
func cellVar(name, suffix string) string {
	return "BOXOFFICE_CELL_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_" + suffix
}

// loadCells gives each cell BOXOFFICE_CELLS listed its database URL, or
// makes the one cell BOXOFFICE_CELL on DATABASE_URL when it listed none.
func loadCells(getenv func(string) string, c *Config, errs *configErrors) {
	if len(c.Cells) == 0 {
		c.Cells = []cellConfig{{Name: c.Cell, DatabaseURL: c.DatabaseURL}}
		return
	}
	dedicated, shared := map[uuid.UUID]string{}, 0
	for i := range c.Cells {
		name := c.Cells[i].Name
		if c.Cells[i].DatabaseURL = getenv(cellURLVar(name)); c.Cells[i].DatabaseURL == "" {
			errs.add(cellURLVar(name), "is required for cell "+name+" (BOXOFFICE_CELLS)")
		}
		v := strings.TrimSpace(getenv(cellOrganizersVar(name)))
		if v == "" {
			shared++
			continue
		}
		for raw := range strings.SplitSeq(v, ",") {
			id, err := uuid.Parse(strings.TrimSpace(raw))
			switch {
			case err != nil:
				errs.add(cellOrganizersVar(name), fmt.Sprintf("%q is not an organizer id (UUID)", strings.TrimSpace(raw)))
			case dedicated[id] != "" && dedicated[id] != name:
				errs.add(cellOrganizersVar(name), "organizer "+id.String()+" is dedicated to cell "+dedicated[id]+" too")
			default:
				dedicated[id] = name
				c.Cells[i].Organizers = append(c.Cells[i].Organizers, id)
			}
		}
	}
	if shared == 0 {
		errs.add("BOXOFFICE_CELLS", "every cell is dedicated to organizers (BOXOFFICE_CELL_<NAME>_ORGANIZERS); at least one must take the others")
	}
}

// webhookConfig is the outbound webhooks' part of the environment.
type webhookConfig struct {
	// AllowPrivate lets endpoints use plain http and reach private,
	// loopback and link-local addresses (BOXOFFICE_WEBHOOK_ALLOW_PRIVATE,
	// true or false). Defaults to false; dev sets true.
	AllowPrivate bool
	// MaxEndpoints is how many endpoints one organizer may have
	// (BOXOFFICE_WEBHOOK_MAX_ENDPOINTS). Defaults to 20.
	MaxEndpoints int
	// RetrySchedule is the delay before each attempt
	// (BOXOFFICE_WEBHOOK_RETRY_SCHEDULE, comma-separated durations).
	// Defaults to 0s,5s,5m,30m,2h,5h,10h,10h.
	RetrySchedule []time.Duration
	// Timeout bounds one attempt (BOXOFFICE_WEBHOOK_TIMEOUT). Defaults to 15s.
	Timeout time.Duration
	// Retention is how long messages and attempts are kept
	// (BOXOFFICE_WEBHOOK_RETENTION). Defaults to 720h (30 days).
	Retention time.Duration
	// DisableAfter disables an endpoint that failed every attempt for that
	// long (BOXOFFICE_WEBHOOK_DISABLE_AFTER). Defaults to 120h (5 days).
	DisableAfter time.Duration
	// SecretKeys seal endpoint secrets at rest
	// (BOXOFFICE_WEBHOOK_SECRET_KEYS: comma-separated <key id>:<base64 of
	// 32 bytes>, the first sealing, all opening). Required by serve and by
	// work's webhook workers. Defaults to none; dev sets
	// DevWebhookSecretKeys.
	SecretKeys *webhooks.Keyring
}

// webhookKeysVar names the endpoint-secret key list.
const webhookKeysVar = "BOXOFFICE_WEBHOOK_SECRET_KEYS"

// errNoWebhookKeys is the configuration error of a role that stores or
// signs with endpoint secrets and has no key to seal them with.
var errNoWebhookKeys = &configError{webhookKeysVar, "is required to seal webhook endpoint secrets (comma-separated <key id>:<base64 of 32 bytes>, the first one sealing)"}

// configError names the variable that stops start-up.
type configError struct{ name, problem string }

func (e *configError) Error() string { return e.name + ": " + e.problem }

// configErrors collects the problems of an environment, one per variable,
// so that start-up reports every bad setting at once.
type configErrors struct {
	list  []error
	named map[string]bool
}

// add records the problem of the variable name, unless it has one already.
func (e *configErrors) add(name, problem string) {
	if e.named[name] {
		return
	}
	if e.named == nil {
		e.named = map[string]bool{}
	}
	e.named[name] = true
	e.list = append(e.list, &configError{name, problem})
}

// has reports whether the variable name has a problem.
func (e *configErrors) has(name string) bool { return e.named[name] }

// err is every problem, one line each (errors.Join), or nil.
func (e *configErrors) err() error { return errors.Join(e.list...) }

// LoadConfig reads the environment: each variable of settings, parsed as
// its entry says, then the rules that join two of them. required lists the
// variables this role cannot run without. The error, if any, reports every
// bad setting at once, a line each ("NAME: what it must be", errors.Join),
// never a value. A secret variable may be read from a file instead
// (<VAR>_FILE: withSecretFiles), and a secret this repository publishes is
// refused (refusePublicSecrets): every command but dev, token and the
// lab's benchmarks reads its configuration here.
func LoadConfig(getenv func(string) string, required ...string) (Config, error) {
	return loadConfig(getenv, false, required...)
}

// operatorPool reads the configuration with DATABASE_URL required
// (LoadConfig) and opens a pool of maxConns to it for an operator's
// command (audit, failover, fence). The pool declares no region epoch, so
// the command is never fenced: it must work on a database that fences
// every process of the old primary. The caller closes the pool.
func operatorPool(ctx context.Context, getenv func(string) string, maxConns int32) (Config, *pgxpool.Pool, error) {
	cfg, err := LoadConfig(getenv, "DATABASE_URL")
	if err != nil {
		return cfg, nil, err
	}
	pool, err := db.NewPool(ctx, db.PoolConfig{URL: cfg.DatabaseURL, MaxConns: maxConns})
	return cfg, pool, err
}

// LoadDevConfig is LoadConfig that accepts the public development secrets
// (DevJWTSecret and the others), for what never serves real buyers:
// `boxoffice dev`, which fills the unset secrets with them; `boxoffice
// token`, which only mints a bearer token, one that a server accepts only
// if it holds the same secret, and so with the dev secret only dev's; and
// the lab's in-process benchmarks on their throwaway databases.
func LoadDevConfig(getenv func(string) string, required ...string) (Config, error) {
	return loadConfig(getenv, true, required...)
}

func loadConfig(getenv func(string) string, allowPublicSecrets bool, required ...string) (Config, error) {
	var errs configErrors
	getenv = withSecretFiles(getenv, &errs)
	var c Config
	for _, s := range settings {
		if s.parse == nil {
			continue
		}
		if err := s.parse(cmp.Or(getenv(s.name), s.def), &c); err != nil {
			errs.add(s.name, err.Error())
		}
	}
	// The rules that join two settings, once each is read.
	if c.DatabaseURL == "" {
		// A relay or worker of a cell may read its database from the
		// variable the API reads it from.
		c.DatabaseURL = getenv(cellURLVar(c.Cell))
	}
	if !errs.has("BOXOFFICE_CELL") {
		c.Streams.Namespace = bus.ForCell(c.Cell)
	}
	loadCells(getenv, &c, &errs)
	for _, name := range required {
		if name == "DATABASE_URL" && c.DatabaseURL != "" {
			continue // BOXOFFICE_CELL_<CELL>_DATABASE_URL gave it
		}
		if getenv(name) == "" {
			errs.add(name, "is required but not set")
		}
	}
	if c.JWKSURL != "" {
		if c.JWTIssuer == "" {
			errs.add("BOXOFFICE_JWT_ISSUER", "is required with BOXOFFICE_JWKS_URL")
		}
		if c.JWTAudience == "" {
			errs.add("BOXOFFICE_JWT_AUDIENCE", "is required with BOXOFFICE_JWKS_URL")
		}
	}
	if !errs.has("BOXOFFICE_ADMISSION_RATE") && c.AdmissionRateMax < c.AdmissionRate {
		errs.add("BOXOFFICE_ADMISSION_RATE_MAX", errAdmissionRateMax)
	}
	if !allowPublicSecrets {
		c.refusePublicSecrets(getenv, &errs)
	}
	return c, errs.err()
}

// isLoopback reports whether host is localhost or a loopback address.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serveNeeds is the configuration error of a role that serves the API,
// if any: a way to verify bearer tokens and a key to sign admissions.
func (c Config) serveNeeds() error {
	switch {
	case c.JWKSURL == "" && len(c.JWTSecret) == 0:
		return &configError{"BOXOFFICE_JWKS_URL", "or BOXOFFICE_JWT_SECRET is required"}
	case c.AdmissionSigningKey == nil && len(c.AdmissionKey) == 0:
		return &configError{"BOXOFFICE_ADMISSION_SIGNING_KEY", "(or the legacy BOXOFFICE_ADMISSION_KEY) is required"}
	}
	return nil
}

// admissionSigner is the signer of the process's admission tokens.
func (c Config) admissionSigner() *admission.Signer {
	return admission.NewSigner(admission.SignerConfig{SigningKey: c.AdmissionSigningKey, Key: c.AdmissionKey, TTL: c.AdmissionTTL})
}

// openBearer builds the bearer verifier of cfg into cfg.bearer: with a
// JWKS URL it fetches the JWK Set (an error if it cannot) and refreshes
// it until ctx is done.
func openBearer(ctx context.Context, cfg *Config, logger *slog.Logger) error {
	v, err := auth.New(ctx, auth.VerifierConfig{
		Secret: cfg.JWTSecret, JWKSURL: cfg.JWKSURL, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience, Logger: logger,
	})
	if err != nil {
		return err
	}
	cfg.bearer = v
	return nil
}

// NewLogger is every command's JSON logger on stderr at level. With
// tracing on, a line written with a span's context carries its trace_id
// and span_id (telemetry.LogHandler).
func NewLogger(level slog.Level) *slog.Logger {
	return slog.New(telemetry.LogHandler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
}

// logger is the process's logger (NewLogger at LogLevel) with the region
// epoch it writes under on every line: after a failover, the lines of a
// process still on the old epoch tell themselves apart. Each cell adds
// its name (openCells).
func (c Config) logger() *slog.Logger {
	return NewLogger(c.LogLevel).With("region_epoch", c.RegionEpoch)
}

// PoolConfig is the pool configuration of a role's database at url: the
// process's size, region epoch and statement and lock timeouts. Every
// role, `boxoffice dev` and the benchmark's product part open their pools
// from it, so a benchmark measures the sessions production runs (the
// region fence's check on every write included).
func (c Config) PoolConfig(url string) db.PoolConfig {
	return db.PoolConfig{
		URL: url, MaxConns: c.DBMaxConns, RegionEpoch: c.RegionEpoch,
		StatementTimeout: c.DBStatementTimeout, LockTimeout: c.DBLockTimeout,
		Tracer: telemetry.PgxTracer(),
	}
}

// paymentsNeeds returns the configuration error of a role that moves money
// or receives the provider's webhooks, if any.
func (c Config) paymentsNeeds() error {
	switch {
	case c.Payments == "stripe" && c.StripeSecretKey == "":
		return &configError{"STRIPE_SECRET_KEY", "is required: payments go to Stripe unless BOXOFFICE_PAYMENTS=sandbox is set, " +
			"for development and tests only (the sandbox lets buyers authorize their own payments)"}
	case c.Payments == "sandbox" && c.StripeWebhookSecret == "":
		return &configError{"STRIPE_WEBHOOK_SECRET", "is required to sign the sandbox's webhooks (BOXOFFICE_PAYMENTS=sandbox)"}
	}
	return nil
}

// newProvider builds the payment provider the configuration names; sandbox
// is also returned for its buyer actions and webhook sender.
func newProvider(cfg Config, pool *pgxpool.Pool, logger *slog.Logger) (payments.Provider, *sandbox.Sandbox, error) {
	if err := cfg.paymentsNeeds(); err != nil {
		return nil, nil, err
	}
	if cfg.Payments == "stripe" {
		p, err := payments.NewStripe(payments.StripeConfig{
			SecretKey: cfg.StripeSecretKey, APIBase: cfg.StripeAPIBase, Logger: logger, HTTPClient: telemetry.HTTPClient(payments.StripeHTTPClient()),
		})
		if err != nil {
			return nil, nil, err
		}
		return payments.Traced(p, "stripe"), nil, nil
	}
	sb, err := sandbox.New(pool, sandbox.Config{
		WebhookURL: cfg.SandboxWebhookURL, WebhookSecret: cfg.StripeWebhookSecret, Logger: logger,
	})
	if err != nil {
		return nil, nil, err
	}
	return payments.Traced(sb, "sandbox"), sb, nil
}
