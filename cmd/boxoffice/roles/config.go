package roles

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"boxoffice/domain/payments"
	"boxoffice/domain/payments/sandbox"
	"boxoffice/domain/webhooks"
	"boxoffice/handlers"
	"boxoffice/ops/retention"
	"boxoffice/platform/admission"
	"boxoffice/platform/auth"
	"boxoffice/platform/bus"
	"boxoffice/platform/db"
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
}

// cellURLVar is the variable that holds the named cell's database URL.
func cellURLVar(name string) string {
	return "BOXOFFICE_CELL_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_DATABASE_URL"
}

// loadCells reads BOXOFFICE_CELLS and each listed cell's database URL.
func loadCells(getenv func(string) string, c *Config) error {
	list := getenv("BOXOFFICE_CELLS")
	if list == "" {
		c.Cells = []cellConfig{{Name: c.Cell, DatabaseURL: c.DatabaseURL}}
		return nil
	}
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		switch {
		case !bus.ValidCellName(name):
			return &configError{"BOXOFFICE_CELLS", fmt.Sprintf("%q is not a cell name (1–32 of a-z, 0-9, _ and -)", name)}
		case seen[name]:
			return &configError{"BOXOFFICE_CELLS", fmt.Sprintf("cell %q is listed twice", name)}
		case getenv(cellURLVar(name)) == "":
			return &configError{cellURLVar(name), "is required for cell " + name + " (BOXOFFICE_CELLS)"}
		}
		seen[name] = true
		c.Cells = append(c.Cells, cellConfig{Name: name, DatabaseURL: getenv(cellURLVar(name))})
	}
	return nil
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

// LoadConfig reads the environment. required lists the variables this role
// cannot run without. A secret variable may be read from a file instead
// (<VAR>_FILE: withSecretFiles), and a secret this repository publishes is
// refused (refusePublicSecrets): every command but dev, token and the
// lab's benchmarks reads its configuration here.
func LoadConfig(getenv func(string) string, required ...string) (Config, error) {
	return loadConfig(getenv, false, required...)
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
	getenv, err := withSecretFiles(getenv)
	if err != nil {
		return Config{}, err
	}
	c := Config{
		DatabaseURL:  getenv("DATABASE_URL"),
		HTTPAddr:     cmp.Or(getenv("HTTP_ADDR"), ":8080"),
		JWTSecret:    []byte(getenv("BOXOFFICE_JWT_SECRET")),
		JWKSURL:      getenv("BOXOFFICE_JWKS_URL"),
		JWTIssuer:    getenv("BOXOFFICE_JWT_ISSUER"),
		JWTAudience:  getenv("BOXOFFICE_JWT_AUDIENCE"),
		AdmissionKey: []byte(getenv("BOXOFFICE_ADMISSION_KEY")),
		Cell:         cmp.Or(getenv("BOXOFFICE_CELL"), "default"),
		NATSURL:      getenv("NATS_URL"),
		NATSCreds:    getenv("NATS_CREDS"),
		OpsAddr:      cmp.Or(getenv("OPS_ADDR"), ":9090"),

		StripeWebhookSecret: getenv("STRIPE_WEBHOOK_SECRET"),
		StripeSecretKey:     getenv("STRIPE_SECRET_KEY"),
		StripeAPIBase:       getenv("STRIPE_API_BASE"),
		SandboxWebhookURL:   cmp.Or(getenv("BOXOFFICE_SANDBOX_WEBHOOK_URL"), "http://127.0.0.1:8080/v1/webhooks/stripe"),
	}
	if !bus.ValidCellName(c.Cell) {
		return c, &configError{"BOXOFFICE_CELL", "must be 1–32 of a-z, 0-9, _ and -"}
	}
	if c.DatabaseURL == "" {
		// A relay or worker of a cell may read its database from the
		// variable the API reads it from.
		c.DatabaseURL = getenv(cellURLVar(c.Cell))
	}
	c.Streams.Namespace = bus.ForCell(c.Cell)
	if err := loadCells(getenv, &c); err != nil {
		return c, err
	}
	for _, name := range required {
		if name == "DATABASE_URL" && c.DatabaseURL != "" {
			continue // BOXOFFICE_CELL_<CELL>_DATABASE_URL gave it
		}
		if getenv(name) == "" {
			return c, &configError{name, "is required but not set"}
		}
	}
	for name, v := range map[string][]byte{"BOXOFFICE_JWT_SECRET": c.JWTSecret, "BOXOFFICE_ADMISSION_KEY": c.AdmissionKey} {
		if len(v) > 0 && len(v) < 32 {
			return c, &configError{name, "must be at least 32 bytes"}
		}
	}
	if err := loadIdentity(getenv, &c); err != nil {
		return c, err
	}
	maxConns, err := strconv.Atoi(cmp.Or(getenv("DATABASE_MAX_CONNS"), "16"))
	if err != nil || maxConns < 1 {
		return c, &configError{"DATABASE_MAX_CONNS", "must be a positive number"}
	}
	c.DBMaxConns = int32(maxConns)
	if c.HoldTTL, err = time.ParseDuration(cmp.Or(getenv("BOXOFFICE_HOLD_TTL"), "5m")); err != nil || c.HoldTTL <= 0 {
		return c, &configError{"BOXOFFICE_HOLD_TTL", "must be a positive duration such as 5m"}
	}
	if c.AdmissionTTL, err = time.ParseDuration(cmp.Or(getenv("BOXOFFICE_ADMISSION_TTL"), "15m")); err != nil ||
		c.AdmissionTTL < time.Minute || c.AdmissionTTL > 24*time.Hour {
		return c, &configError{"BOXOFFICE_ADMISSION_TTL", "must be a duration from 1m to 24h such as 15m"}
	}
	// Durations with a floor: 0 turns a timeout off; a retention may not
	// be shorter than the window that depends on it.
	for _, d := range []struct {
		name, def string
		min       time.Duration
		to        *time.Duration
	}{
		{"DATABASE_STATEMENT_TIMEOUT", "30s", 0, &c.DBStatementTimeout},
		{"DATABASE_LOCK_TIMEOUT", "10s", 0, &c.DBLockTimeout},
		{"BOXOFFICE_INBOX_RETENTION", "840h", retention.MinInbox, &c.InboxRetention},
		{"BOXOFFICE_STRIPE_EVENT_RETENTION", "720h", retention.MinStripeEvents, &c.StripeEventRetention},
		{"BOXOFFICE_RECONCILE_INTERVAL", "15m", time.Minute, &c.ReconcileInterval},
		{"BOXOFFICE_STREAM_MAX_AGE", "168h", time.Hour, &c.Streams.MaxAge},
	} {
		if *d.to, err = time.ParseDuration(cmp.Or(getenv(d.name), d.def)); err != nil || *d.to < d.min {
			return c, &configError{d.name, "must be a duration of at least " + d.min.String() + ", such as " + d.def}
		}
	}
	if c.PaymentGrace, err = time.ParseDuration(cmp.Or(getenv("BOXOFFICE_PAYMENT_GRACE"), "5m")); err != nil || c.PaymentGrace < 0 || c.PaymentGrace > 15*time.Minute {
		return c, &configError{"BOXOFFICE_PAYMENT_GRACE", "must be a duration from 0 to 15m, such as 5m"}
	}
	replicas, err := strconv.Atoi(cmp.Or(getenv("BOXOFFICE_STREAM_REPLICAS"), "1"))
	if err != nil || replicas < 1 || replicas > 5 {
		return c, &configError{"BOXOFFICE_STREAM_REPLICAS", "must be a number from 1 to 5"}
	}
	c.Streams.Replicas = replicas
	switch c.Payments = getenv("BOXOFFICE_PAYMENTS"); c.Payments {
	case "":
		// Never the sandbox by default: with it buyers pay themselves.
		c.Payments = "stripe"
	case "stripe", "sandbox":
	default:
		return c, &configError{"BOXOFFICE_PAYMENTS", "must be stripe or sandbox"}
	}
	if seed := getenv("BOXOFFICE_TICKET_SIGNING_KEY"); seed != "" {
		if c.TicketSeed, err = base64.StdEncoding.DecodeString(seed); err != nil || len(c.TicketSeed) != ed25519.SeedSize {
			return c, &configError{"BOXOFFICE_TICKET_SIGNING_KEY", "must be the base64 of a 32-byte Ed25519 seed"}
		}
	}
	c.RedisURL = getenv("REDIS_URL")
	if c.RedisURL != "" {
		if _, err := redis.ParseURL(c.RedisURL); err != nil {
			return c, &configError{"REDIS_URL", "must be a redis:// or rediss:// URL"}
		}
	}
	if c.AdmissionRate, err = strconv.ParseFloat(cmp.Or(getenv("BOXOFFICE_ADMISSION_RATE"), "200"), 64); err != nil || c.AdmissionRate <= 0 {
		return c, &configError{"BOXOFFICE_ADMISSION_RATE", "must be a positive number of admissions per second"}
	}
	if c.AdmissionRateMax, err = strconv.ParseFloat(cmp.Or(getenv("BOXOFFICE_ADMISSION_RATE_MAX"), "5000"), 64); err != nil || c.AdmissionRateMax < c.AdmissionRate {
		return c, &configError{"BOXOFFICE_ADMISSION_RATE_MAX", "must be a number of admissions per second at least BOXOFFICE_ADMISSION_RATE"}
	}
	if c.WaitingRoomIPLimit, err = strconv.Atoi(cmp.Or(getenv("BOXOFFICE_WAITINGROOM_IP_LIMIT"), "200")); err != nil || c.WaitingRoomIPLimit < -1 || c.WaitingRoomIPLimit == 0 {
		return c, &configError{"BOXOFFICE_WAITINGROOM_IP_LIMIT", "must be a positive number of requests per second, or -1 for none"}
	}
	for o := range strings.SplitSeq(getenv("BOXOFFICE_CORS_ORIGINS"), ",") {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		if !handlers.ValidCORSOrigin(o) {
			return c, &configError{"BOXOFFICE_CORS_ORIGINS", "must list origins such as https://shop.example.com, comma-separated (no path, no *)"}
		}
		c.CORSOrigins = append(c.CORSOrigins, o)
	}
	if c.HoldRateLimit, err = strconv.Atoi(cmp.Or(getenv("BOXOFFICE_HOLD_RATE_LIMIT"), "5")); err != nil || c.HoldRateLimit < -1 || c.HoldRateLimit == 0 {
		return c, &configError{"BOXOFFICE_HOLD_RATE_LIMIT", "must be a positive number of holds per second per buyer, or -1 for none"}
	}
	if c.EventReadIPLimit, err = strconv.Atoi(cmp.Or(getenv("BOXOFFICE_EVENT_READ_IP_LIMIT"), "200")); err != nil || c.EventReadIPLimit < -1 || c.EventReadIPLimit == 0 {
		return c, &configError{"BOXOFFICE_EVENT_READ_IP_LIMIT", "must be a positive number of requests per second, or -1 for none"}
	}
	if c.Webhooks, err = loadWebhookConfig(getenv); err != nil {
		return c, err
	}
	if c.RegionEpoch, err = strconv.ParseInt(cmp.Or(getenv("BOXOFFICE_REGION_EPOCH"), "1"), 10, 64); err != nil || c.RegionEpoch < 1 {
		return c, &configError{"BOXOFFICE_REGION_EPOCH", "must be a whole number from 1"}
	}
	if err := c.LogLevel.UnmarshalText([]byte(cmp.Or(getenv("BOXOFFICE_LOG_LEVEL"), "info"))); err != nil {
		return c, &configError{"BOXOFFICE_LOG_LEVEL", "must be debug, info, warn or error"}
	}
	if !allowPublicSecrets {
		if err := c.refusePublicSecrets(getenv); err != nil {
			return c, err
		}
	}
	return c, nil
}

// loadIdentity reads the JWKS settings and the admission signing key.
func loadIdentity(getenv func(string) string, c *Config) error {
	if c.JWKSURL != "" {
		u, err := url.Parse(c.JWKSURL)
		switch {
		case err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && isLoopback(u.Hostname()))):
			// The keys that sign every bearer token: fetched over plain
			// http, anyone on the path could swap in their own.
			return &configError{"BOXOFFICE_JWKS_URL", "must be an https URL (http only for a loopback address)"}
		case c.JWTIssuer == "":
			return &configError{"BOXOFFICE_JWT_ISSUER", "is required with BOXOFFICE_JWKS_URL"}
		case c.JWTAudience == "":
			return &configError{"BOXOFFICE_JWT_AUDIENCE", "is required with BOXOFFICE_JWKS_URL"}
		}
	}
	if v := getenv("BOXOFFICE_ADMISSION_SIGNING_KEY"); v != "" {
		k, err := admission.ParseSigningKey(v)
		if err != nil {
			// The reason only: never the value.
			return &configError{"BOXOFFICE_ADMISSION_SIGNING_KEY", "must be a PEM PKCS #8 Ed25519 private key or the base64 of its 32-byte seed (" + err.Error() + ")"}
		}
		c.AdmissionSigningKey = k
	}
	return nil
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

// loadWebhookConfig reads the BOXOFFICE_WEBHOOK_* variables.
func loadWebhookConfig(getenv func(string) string) (webhookConfig, error) {
	var w webhookConfig
	var err error
	if w.AllowPrivate, err = strconv.ParseBool(cmp.Or(getenv("BOXOFFICE_WEBHOOK_ALLOW_PRIVATE"), "false")); err != nil {
		return w, &configError{"BOXOFFICE_WEBHOOK_ALLOW_PRIVATE", "must be true or false"}
	}
	if w.MaxEndpoints, err = strconv.Atoi(cmp.Or(getenv("BOXOFFICE_WEBHOOK_MAX_ENDPOINTS"), strconv.Itoa(webhooks.DefaultMaxEndpoints))); err != nil || w.MaxEndpoints < 1 {
		return w, &configError{"BOXOFFICE_WEBHOOK_MAX_ENDPOINTS", "must be a positive number"}
	}
	if v := getenv("BOXOFFICE_WEBHOOK_RETRY_SCHEDULE"); v != "" {
		if w.RetrySchedule, err = webhooks.ParseRetrySchedule(v); err != nil {
			return w, &configError{"BOXOFFICE_WEBHOOK_RETRY_SCHEDULE", "must be comma-separated durations such as 0s,5s,5m,30m"}
		}
	}
	if v := getenv("BOXOFFICE_WEBHOOK_SECRET_KEYS"); v != "" {
		if w.SecretKeys, err = webhooks.ParseKeyring(v); err != nil {
			return w, &configError{webhookKeysVar, err.Error()}
		}
	}
	for _, d := range []struct {
		name, def string
		dst       *time.Duration
	}{
		{"BOXOFFICE_WEBHOOK_TIMEOUT", "15s", &w.Timeout},
		{"BOXOFFICE_WEBHOOK_RETENTION", "720h", &w.Retention},
		{"BOXOFFICE_WEBHOOK_DISABLE_AFTER", "120h", &w.DisableAfter},
	} {
		if *d.dst, err = time.ParseDuration(cmp.Or(getenv(d.name), d.def)); err != nil || *d.dst <= 0 {
			return w, &configError{d.name, "must be a positive duration such as " + d.def}
		}
	}
	return w, nil
}

func NewLogger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// rolePool is the pool configuration of a role's database at url: the
// process's size, region epoch and statement and lock timeouts.
func (c Config) rolePool(url string) db.PoolConfig {
	return db.PoolConfig{
		URL: url, MaxConns: c.DBMaxConns, RegionEpoch: c.RegionEpoch,
		StatementTimeout: c.DBStatementTimeout, LockTimeout: c.DBLockTimeout,
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
		p, err := payments.NewStripe(payments.StripeConfig{SecretKey: cfg.StripeSecretKey, APIBase: cfg.StripeAPIBase, Logger: logger})
		return p, nil, err
	}
	sb, err := sandbox.New(pool, sandbox.Config{
		WebhookURL: cfg.SandboxWebhookURL, WebhookSecret: cfg.StripeWebhookSecret, Logger: logger,
	})
	return sb, sb, err
}
