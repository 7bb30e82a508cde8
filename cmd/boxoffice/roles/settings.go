package roles

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"boxoffice/consumers"
	"boxoffice/domain/purchase"
	"boxoffice/domain/waitingroom"
	"boxoffice/domain/waitlist"
	"boxoffice/domain/webhooks"
	"boxoffice/handlers"
	"boxoffice/ops/reconcile"
	"boxoffice/ops/retention"
	"boxoffice/platform/admission"
	"boxoffice/platform/bus"
)

// setting is one environment variable of the binaries: its name, its
// default, how it is parsed into a Config and what the README says of it.
// settings holds each one once; LoadConfig reads them from it, devEnv
// takes dev's defaults from it, withSecretFiles its secrets, and
// `boxoffice settings -readme README.md` writes the README's table from it
// (make generate; make check-generated and TestReadmeSettingsTable fail
// when the README differs).
type setting struct {
	name string
	// def is the value of the variable when it is unset or empty.
	def string
	// shown is the README's default column when def alone does not say it
	// (dev's own value, a default that depends on another setting).
	shown string
	// dev is the value `boxoffice dev` gives the variable when it is unset.
	dev string
	// secret: the value may instead be read from the file <name>_FILE.
	secret bool
	// meaning is the README's description (Markdown).
	meaning string
	// parse stores v (the variable's value, or def) into c; its error says
	// what the value must be, and LoadConfig puts the name before it. Nil:
	// the variable is read elsewhere, as meaning says.
	parse func(v string, c *Config) error
}

// env begins the setting of the environment variable name.
func env(name string) setting { return setting{name: name} }

// Default sets the value an unset variable takes.
func (s setting) Default(v string) setting { s.def = v; return s }

// Shown sets the README's default column.
func (s setting) Shown(text string) setting { s.shown = text; return s }

// Dev sets the value `boxoffice dev` gives the variable when it is unset.
func (s setting) Dev(v string) setting { s.dev = v; return s }

// Secret marks a variable that may be read from <name>_FILE.
func (s setting) Secret() setting { s.secret = true; return s }

// Means sets the README's description.
func (s setting) Means(text string) setting { s.meaning = text; return s }

// Parse sets how the value reaches a Config.
func (s setting) Parse(f func(v string, c *Config) error) setting { s.parse = f; return s }

// must is nil when ok, else the problem of a value.
func must(ok bool, problem string) error {
	if ok {
		return nil
	}
	return errors.New(problem)
}

// DurationText is d as a setting's default spells it, without its zero
// minutes and seconds: 5m, 168h, not 5m0s. The lab's reports spell
// durations the same way.
func DurationText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// durationAtLeast parses a duration of at least floor into *to.
func durationAtLeast(floor time.Duration, example string, to func(*Config) *time.Duration) func(string, *Config) error {
	return func(v string, c *Config) (err error) {
		d := to(c)
		*d, err = time.ParseDuration(v)
		return must(err == nil && *d >= floor, "must be a duration of at least "+floor.String()+", such as "+example)
	}
}

// positiveDuration parses a duration above zero into *to.
func positiveDuration(example string, to func(*Config) *time.Duration) func(string, *Config) error {
	return func(v string, c *Config) (err error) {
		d := to(c)
		*d, err = time.ParseDuration(v)
		return must(err == nil && *d > 0, "must be a positive duration such as "+example)
	}
}

// perSecondLimit parses a positive number, or -1 for none, into *to.
func perSecondLimit(problem string, to func(*Config) *int) func(string, *Config) error {
	return func(v string, c *Config) (err error) {
		n := to(c)
		*n, err = strconv.Atoi(v)
		return must(err == nil && *n >= -1 && *n != 0, problem)
	}
}

// text stores the value as it is into *to.
func text(to func(*Config) *string) func(string, *Config) error {
	return func(v string, c *Config) error { *to(c) = v; return nil }
}

// secretBytes stores the value into *to; one that is set must have at
// least 32 bytes.
func secretBytes(to func(*Config) *[]byte) func(string, *Config) error {
	return func(v string, c *Config) error {
		*to(c) = []byte(v)
		return must(v == "" || len(v) >= 32, "must be at least 32 bytes")
	}
}

// settings are the environment variables of the binaries, in the
// README's order. LoadConfig parses them in this order; the rules that
// join two settings (the JWKS URL and its issuer, R and its ceiling, the
// cells and their URLs, the public secrets) run after every one is read.
var settings = []setting{
	env("DATABASE_URL").Secret().
		Means("PostgreSQL URL, passed to pgx as it is: set `sslmode` there (`verify-full` with `sslrootcert` across a network; compose uses `disable` on its private network); required by `serve` and `migrate`").
		Parse(text(func(c *Config) *string { return &c.DatabaseURL })),
	env("DATABASE_MAX_CONNS").Default("16").
		Means("connections in the pool of one process; each role warns at start (\"connection budget\") when the sessions open on the server plus its pool, filled, exceed `max_connections`").
		Parse(func(v string, c *Config) error {
			n, err := strconv.Atoi(v)
			c.DBMaxConns = int32(n) //nolint:gosec // a pool's size, as it always was
			return must(err == nil && n >= 1, "must be a positive number")
		}),
	env("DATABASE_STATEMENT_TIMEOUT").Default("30s").
		Means("`statement_timeout` of the product's pools (`serve`, `relay`, `work`, `dev`): a stuck statement fails instead of hanging every request behind it; `0` turns it off").
		Parse(durationAtLeast(0, "30s", func(c *Config) *time.Duration { return &c.DBStatementTimeout })),
	env("DATABASE_LOCK_TIMEOUT").Default("10s").
		Means("`lock_timeout` of the same pools: one stuck lock fails its statement instead of hanging every request behind it; `0` turns it off").
		Parse(durationAtLeast(0, "10s", func(c *Config) *time.Duration { return &c.DBLockTimeout })),
	env("NATS_URL").Secret().Shown("embedded in `dev`").
		Means("NATS server with JetStream; required by `relay` and `work`, reported by `serve`'s `/readyz`. A user and password go in the URL (`nats://user:password@host:4222`, each server of a list); logs show it redacted").
		Parse(text(func(c *Config) *string { return &c.NATSURL })),
	env("NATS_CREDS").Shown("none").
		Means("a NATS credentials file (user JWT and nkey seed) for servers with decentralised auth").
		Parse(text(func(c *Config) *string { return &c.NATSCreds })),
	env("BOXOFFICE_STREAM_REPLICAS").Default("1").
		Means("replicas of the `TICKETING` and `TICKETING_DLQ` streams: 1 for one server, 3 for a cluster").
		Parse(func(v string, c *Config) (err error) {
			c.Streams.Replicas, err = strconv.Atoi(v)
			return must(err == nil && c.Streams.Replicas >= 1 && c.Streams.Replicas <= 5, "must be a number from 1 to 5")
		}),
	env("BOXOFFICE_STREAM_MAX_AGE").Default("168h").
		Means("how long the `TICKETING` stream keeps events: the replay horizon for rebuilding a consumer's state after a bad deployment, and what its storage grows to (`docs/capacity.md`); at least `1h`").
		Parse(durationAtLeast(time.Hour, "168h", func(c *Config) *time.Duration { return &c.Streams.MaxAge })),
	env("OPS_ADDR").Default(":9090").Dev("127.0.0.1:9090").
		Shown("`:9090` (`127.0.0.1:9090` in dev, or a free port it prints when 9090 is taken)").
		Means("`/healthz`, `/readyz`, `/metrics` of every role; the API's metrics are served only here, never on `HTTP_ADDR`").
		Parse(text(func(c *Config) *string { return &c.OpsAddr })),
	env("HTTP_ADDR").Default(":8080").Dev("127.0.0.1:8080").Shown("`:8080` (`127.0.0.1:8080` in dev)").
		Means("listen address").
		Parse(text(func(c *Config) *string { return &c.HTTPAddr })),
	env("BOXOFFICE_JWKS_URL").Shown("none").
		Means("the identity provider's JWK Set (https; plain http only to a loopback address — whoever could rewrite the keys could sign tokens): bearer tokens signed with RS256, ES256 (P-256) or EdDSA (Ed25519) by one of its keys, named by `kid`, are accepted. Keys are cached, fetched again hourly and on a `kid` not in the cache (at most once a minute, so forged `kid`s cause no refresh storm); `serve` does not start if the first fetch fails. The tokens must carry `sub` (UUID), `exp`, `role` (`buyer`, `organizer` or `scanner`) and, for organizers and scanners, `org` (the organizer's UUID); `exp`, `iat` and `nbf` must be JSON numbers (`\"exp\": \"1700000000\"` is refused) and are checked with 30 s of clock skew (`auth.ClockSkew`): a token issued (`iat`) further in the future is refused").
		Parse(func(v string, c *Config) error {
			c.JWKSURL = v
			if v == "" {
				return nil
			}
			u, err := url.Parse(v)
			// The keys that sign every bearer token: fetched over plain
			// http, anyone on the path could swap in their own.
			return must(err == nil && u.Host != "" && (u.Scheme == "https" || (u.Scheme == "http" && isLoopback(u.Hostname()))),
				"must be an https URL (http only for a loopback address)")
		}),
	env("BOXOFFICE_JWT_ISSUER").
		Means("the `iss` every JWKS token must carry; required with `BOXOFFICE_JWKS_URL`").
		Parse(text(func(c *Config) *string { return &c.JWTIssuer })),
	env("BOXOFFICE_JWT_AUDIENCE").
		Means("an `aud` every JWKS token must carry; required with `BOXOFFICE_JWKS_URL`").
		Parse(text(func(c *Config) *string { return &c.JWTAudience })),
	env("BOXOFFICE_JWT_SECRET").Secret().Dev(DevJWTSecret).Shown("dev secret in `dev`").
		Means("HS256 secret of bearer tokens minted by `boxoffice token`, dev and tests, ≥ 32 bytes; required by `serve` without `BOXOFFICE_JWKS_URL` and by `token`. With a JWKS URL too, a token's header `alg` picks the one allowed way to check it: HS256 with this secret, RS256/ES256/EdDSA with the JWKS; anything else (`alg: none` included) is refused. Leave it unset in production to accept JWKS tokens only").
		Parse(secretBytes(func(c *Config) *[]byte { return &c.JWTSecret })),
	env("BOXOFFICE_ADMISSION_SIGNING_KEY").Secret().Shown("derived from `BOXOFFICE_ADMISSION_KEY`").
		Means("Ed25519 private key that signs admission tokens (EdDSA, with a `kid`): PEM PKCS #8 (`openssl genpkey -algorithm ed25519`) or the base64 of its 32-byte seed (`openssl rand -base64 32`). Its public half is served at `GET /v1/admission-keys` as a JWK Set, so an edge worker or CDN verifies admission tokens without any secret. `serve` needs it or `BOXOFFICE_ADMISSION_KEY`").
		Parse(func(v string, c *Config) error {
			if v == "" {
				return nil
			}
			k, err := admission.ParseSigningKey(v)
			if err != nil {
				// The reason only: never the value.
				return errors.New("must be a PEM PKCS #8 Ed25519 private key or the base64 of its 32-byte seed (" + err.Error() + ")")
			}
			c.AdmissionSigningKey = k
			return nil
		}),
	env("BOXOFFICE_ADMISSION_KEY").Secret().Dev(DevAdmissionKey).Shown("dev key in `dev`").
		Means("legacy HS256 admission key, ≥ 32 bytes: while it is set, HS256 admission tokens it signed keep verifying (a migration window), and without `BOXOFFICE_ADMISSION_SIGNING_KEY` the Ed25519 key is derived from it (HMAC-SHA256)").
		Parse(secretBytes(func(c *Config) *[]byte { return &c.AdmissionKey })),
	env("BOXOFFICE_ADMISSION_TTL").Default(DurationText(admission.DefaultTTL)).
		Means("how long an admission token lets its buyer hold seats (`1m` to `24h`); a hold retried with its `Idempotency-Key` gets its order even after the token expired or was revoked").
		Parse(func(v string, c *Config) (err error) {
			c.AdmissionTTL, err = time.ParseDuration(v)
			return must(err == nil && c.AdmissionTTL >= time.Minute && c.AdmissionTTL <= 24*time.Hour, "must be a duration from 1m to 24h such as 15m")
		}),
	env("BOXOFFICE_HOLD_TTL").Default(DurationText(purchase.DefaultHoldTTL)).
		Means("how long a hold owns its seats, unless the event's onsale sets `holdTtlSeconds`").
		Parse(positiveDuration("5m", func(c *Config) *time.Duration { return &c.HoldTTL })),
	env("BOXOFFICE_WAITLIST_OFFER_TTL").Default(DurationText(waitlist.DefaultOfferTTL)).
		Means("how long a waitlist offer reserves its seats for its buyer; not accepted by then, it passes to the next buyer (docs/organizers.md, Waitlist)").
		Parse(positiveDuration("10m", func(c *Config) *time.Duration { return &c.WaitlistOfferTTL })),
	env("BOXOFFICE_INBOX_RETENTION").Default(DurationText(retention.DefaultInbox)).
		Means("how long `work`'s retention worker keeps inbox rows, and the events of orders' timelines (`outbox_history`, docs/timeline.md): at least 31 days, longer than the dead letters a replay may take from. The same worker deletes expired idempotency keys and clears the client secret of orders no longer awaiting payment, in batches of 1,000").
		Parse(durationAtLeast(retention.MinInbox, DurationText(retention.DefaultInbox), func(c *Config) *time.Duration { return &c.InboxRetention })),
	env("BOXOFFICE_STRIPE_EVENT_RETENTION").Default(DurationText(retention.DefaultStripeEvents)).
		Means("how long the retention worker keeps Stripe event ids: at least 3 days, Stripe's retries").
		Parse(durationAtLeast(retention.MinStripeEvents, DurationText(retention.DefaultStripeEvents), func(c *Config) *time.Duration { return &c.StripeEventRetention })),
	env("BOXOFFICE_RECONCILE_INTERVAL").Default(DurationText(reconcile.DefaultInterval)).
		Shown("`" + DurationText(reconcile.DefaultInterval) + "` (at least `1m`)").
		Means("how often `work` reconciles the provider's last 24 hours of PaymentIntents with the orders (one process of the cell at a time, under a PostgreSQL advisory lock; `boxoffice_reconcile_*` metrics): lost webhooks and lost commands (a capture, a cancel or a refund that never reached the provider) are repaired once each, after an order has been in its in-between state for 10 minutes").
		Parse(durationAtLeast(time.Minute, DurationText(reconcile.DefaultInterval), func(c *Config) *time.Duration { return &c.ReconcileInterval })),
	env("BOXOFFICE_PAYMENT_GRACE").Default(DurationText(purchase.DefaultPaymentGrace)).
		Means("how much longer, at most, a hold is kept while its payment is being confirmed (3-D Secure); 0 turns it off, at most `15m`").
		Parse(func(v string, c *Config) (err error) {
			c.PaymentGrace, err = time.ParseDuration(v)
			return must(err == nil && c.PaymentGrace >= 0 && c.PaymentGrace <= 15*time.Minute, "must be a duration from 0 to 15m, such as 5m")
		}),
	env("STRIPE_WEBHOOK_SECRET").Secret().Dev(DevWebhookKey).Shown("dev secret in `dev`").
		Means("signing secret (`whsec_…`) of the Stripe webhook endpoint; unset, `/v1/webhooks/stripe` answers 404. The sandbox signs its webhooks with it (and then needs it)").
		Parse(text(func(c *Config) *string { return &c.StripeWebhookSecret })),
	// dev's default depends on STRIPE_SECRET_KEY: devEnv decides it.
	env("BOXOFFICE_PAYMENTS").Default("stripe").
		Shown("`stripe`, which needs `STRIPE_SECRET_KEY`: unset, `serve`, `work` and `reconcile` do not start (`sandbox` in `dev`, unless `STRIPE_SECRET_KEY` is set)").
		Means("`stripe` or `sandbox` (a Stripe stand-in whose state lives in PostgreSQL and whose signed webhooks come back through `/v1/webhooks/stripe`; its routes let buyers authorize their own payments, so it is for development and tests only). The sandbox runs only when named: `serve`, `work` and `dev` then log a warning at start, `/readyz` (the API's and `OPS_ADDR`'s) says `\"payments\": \"sandbox\"`, and the gauge `boxoffice_payments_sandbox` is 1 (0 with Stripe)").
		Parse(func(v string, c *Config) error {
			// Never the sandbox by default: with it buyers pay themselves.
			c.Payments = v
			return must(v == "stripe" || v == "sandbox", "must be stripe or sandbox")
		}),
	env("STRIPE_SECRET_KEY").Secret().
		Means("Stripe API key; required unless `BOXOFFICE_PAYMENTS=sandbox`").
		Parse(text(func(c *Config) *string { return &c.StripeSecretKey })),
	env("STRIPE_API_BASE").Shown("Stripe's").
		Means("Stripe API base URL (point it at stripe-mock for tests)").
		Parse(text(func(c *Config) *string { return &c.StripeAPIBase })),
	env("BOXOFFICE_SANDBOX_WEBHOOK_URL").Default("http://127.0.0.1:8080/v1/webhooks/stripe").
		Shown("`http://127.0.0.1:8080/v1/webhooks/stripe` (dev: its own API)").
		Means("where the sandbox sends its webhooks").
		Parse(text(func(c *Config) *string { return &c.SandboxWebhookURL })),
	env("BOXOFFICE_TICKET_SIGNING_KEY").Secret().Shown("dev seed in `dev`").
		Means("base64 of the 32-byte Ed25519 seed tickets' QR payloads are signed with (`openssl rand -base64 32`); required by `work`, and by `serve` to publish the public key and to ticket an order in its capture webhook's transaction").
		Parse(func(v string, c *Config) (err error) {
			if v == "" {
				return nil
			}
			c.TicketSeed, err = base64.StdEncoding.DecodeString(v)
			return must(err == nil && len(c.TicketSeed) == ed25519.SeedSize, "must be the base64 of a 32-byte Ed25519 seed")
		}),
	env("BOXOFFICE_CELL").Default("default").
		Means("the purchase cell a `relay`, `work`, `migrate` or `audit` process serves: its database is `DATABASE_URL` (or `BOXOFFICE_CELL_<NAME>_DATABASE_URL`) and its events go to the cell's own streams — see `docs/cells.md`").
		Parse(func(v string, c *Config) error {
			c.Cell = v
			return must(bus.ValidCellName(v), "must be 1–32 of a-z, 0-9, _ and -")
		}),
	env("BOXOFFICE_CELLS").Shown("one cell").
		Means("the purchase cells one `serve` process serves, comma-separated (`a,b`); each needs `BOXOFFICE_CELL_<NAME>_DATABASE_URL`. Unset: one cell, `BOXOFFICE_CELL` on `DATABASE_URL`").
		Parse(func(v string, c *Config) error {
			if v == "" {
				return nil
			}
			var cells []cellConfig
			seen := map[string]bool{}
			for name := range strings.SplitSeq(v, ",") {
				name = strings.TrimSpace(name)
				switch {
				case !bus.ValidCellName(name):
					return fmt.Errorf("%q is not a cell name (1–32 of a-z, 0-9, _ and -)", name)
				case seen[name]:
					return fmt.Errorf("cell %q is listed twice", name)
				}
				seen[name] = true
				cells = append(cells, cellConfig{Name: name})
			}
			c.Cells = cells // their URLs: loadCells
			return nil
		}),
	// Read by loadCells, for each cell BOXOFFICE_CELLS names (and by
	// LoadConfig for BOXOFFICE_CELL when DATABASE_URL is unset).
	env("BOXOFFICE_CELL_<NAME>_DATABASE_URL").Secret().
		Means("the database of the cell `<NAME>` (upper-cased, `-` as `_`): required for each cell of `BOXOFFICE_CELLS`; for `BOXOFFICE_CELL`'s, read when `DATABASE_URL` is unset"),
	// Read by loadCells, for each cell BOXOFFICE_CELLS names.
	env("BOXOFFICE_CELL_<NAME>_ORGANIZERS").Shown("none: the cell is shared").
		Means("organizer ids (UUIDs, comma-separated) the cell `<NAME>` of `BOXOFFICE_CELLS` is dedicated to: each of them not yet stored in a cell is placed there, with all its events, and no other new organizer ever is — a stadium onsale's writer serves nothing else. Organizers already stored stay where they are: set it before the organizer's first request, the same in every `serve` process (docs/cells.md)"),
	env("REDIS_URL").Secret().Shown("in-process").
		Means("the waiting room's Redis (`redis://host:6379/0`); unset, the waiting room is in-process and serves one API process only").
		Parse(func(v string, c *Config) error {
			c.RedisURL = v
			if v == "" {
				return nil
			}
			_, err := redis.ParseURL(v)
			return must(err == nil, "must be a redis:// or rediss:// URL")
		}),
	env("BOXOFFICE_ADMISSION_RATE").Default(strconv.Itoa(waitingroom.DefaultInitialRate)).
		Means("the release controller's initial R, admissions per second").
		Parse(func(v string, c *Config) (err error) {
			c.AdmissionRate, err = strconv.ParseFloat(v, 64)
			return must(err == nil && c.AdmissionRate > 0, "must be a positive number of admissions per second")
		}),
	// At least BOXOFFICE_ADMISSION_RATE: checked once both are read.
	env("BOXOFFICE_ADMISSION_RATE_MAX").Default(strconv.Itoa(waitingroom.DefaultMaxRate)).
		Means("the release controller's ceiling of R, admissions per second; at least `BOXOFFICE_ADMISSION_RATE`").
		Parse(func(v string, c *Config) (err error) {
			c.AdmissionRateMax, err = strconv.ParseFloat(v, 64)
			return must(err == nil, errAdmissionRateMax)
		}),
	env("BOXOFFICE_WAITINGROOM_IP_LIMIT").Default(strconv.Itoa(waitingroom.DefaultPerIPLimit)).
		Means("waiting-room requests per second per client address and event; `-1` for none (when a proxy limits)").
		Parse(perSecondLimit("must be a positive number of requests per second, or -1 for none", func(c *Config) *int { return &c.WaitingRoomIPLimit })),
	env("BOXOFFICE_EVENT_READ_IP_LIMIT").Default(strconv.Itoa(handlers.DefaultEventReadsPerSecond)).
		Means("`GET /v1/events/{id}` and `…/seats` per second per client address (an IPv6 /64), per API process; `-1` for none").
		Parse(perSecondLimit("must be a positive number of requests per second, or -1 for none", func(c *Config) *int { return &c.EventReadIPLimit })),
	env("BOXOFFICE_CORS_ORIGINS").Shown("none: no CORS").
		Means("origins (`https://shop.example.com`, comma-separated, exact; no path, no `*`) whose browser pages may call the API: their requests and preflights get CORS headers (`Authorization`, `Idempotency-Key`, `X-Admission-Token` and `Last-Event-ID` allowed; `Location`, `Retry-After`, `X-Correlation-Id` readable; never `Allow-Credentials`: tokens travel in `Authorization`, never in cookies or URLs)").
		Parse(func(v string, c *Config) error {
			for o := range strings.SplitSeq(v, ",") {
				if o = strings.TrimSpace(o); o == "" {
					continue
				}
				if !handlers.ValidCORSOrigin(o) {
					return errors.New("must list origins such as https://shop.example.com, comma-separated (no path, no *)")
				}
				c.CORSOrigins = append(c.CORSOrigins, o)
			}
			return nil
		}),
	env("BOXOFFICE_HOLD_RATE_LIMIT").Default(strconv.Itoa(handlers.DefaultHoldsPerSecond)).
		Means("holds per second per buyer, per API process, in bursts of twice that; beyond it 429 `/problems/rate-limited` with `Retry-After`, nothing written; `-1` for none").
		Parse(perSecondLimit("must be a positive number of holds per second per buyer, or -1 for none", func(c *Config) *int { return &c.HoldRateLimit })),
	env("BOXOFFICE_WEBHOOK_MAX_ENDPOINTS").Default(strconv.Itoa(webhooks.DefaultMaxEndpoints)).
		Means("webhook endpoints one organizer may have").
		Parse(func(v string, c *Config) (err error) {
			c.Webhooks.MaxEndpoints, err = strconv.Atoi(v)
			return must(err == nil && c.Webhooks.MaxEndpoints >= 1, "must be a positive number")
		}),
	env("BOXOFFICE_REGION_EPOCH").Default("1").
		Means("the region epoch this process writes under; once `boxoffice fence` raises the database's past it, every write is refused (`503 /problems/fenced`) — see `docs/failover.md`").
		Parse(func(v string, c *Config) (err error) {
			c.RegionEpoch, err = strconv.ParseInt(v, 10, 64)
			return must(err == nil && c.RegionEpoch >= 1, "must be a whole number from 1")
		}),
	// Read by `boxoffice failover` (failoverSources).
	env(primaryDatabaseURLVar).
		Means("read only by `boxoffice failover status`, `promote` and `watch`, run against the standby: the old primary's database, to measure the replica's lag against it; unset or not answering, the lag is the standby's last view (docs/failover.md)"),
	env(primaryNATSURLVar).
		Means("the same commands' view of the old primary's NATS, to measure the stream copy's lag against it"),
	env("BOXOFFICE_WEBHOOK_ALLOW_PRIVATE").Default("false").Dev("true").Shown("`false` (`true` in `dev`)").
		Means("`true` lets organizer webhook endpoints use plain `http` and reach private, loopback and link-local addresses (SSRF guard off); never in production").
		Parse(func(v string, c *Config) (err error) {
			c.Webhooks.AllowPrivate, err = strconv.ParseBool(v)
			return must(err == nil, "must be true or false")
		}),
	env("BOXOFFICE_WEBHOOK_RETRY_SCHEDULE").Default(retryScheduleText(webhooks.DefaultRetrySchedule)).
		Means("delay before each webhook attempt, comma-separated; its length is the number of attempts before a delivery is dead").
		Parse(func(v string, c *Config) (err error) {
			c.Webhooks.RetrySchedule, err = webhooks.ParseRetrySchedule(v)
			return must(err == nil, "must be comma-separated durations such as 0s,5s,5m,30m")
		}),
	env("BOXOFFICE_WEBHOOK_TIMEOUT").Default("15s").
		Means("one webhook attempt's timeout").
		Parse(positiveDuration("15s", func(c *Config) *time.Duration { return &c.Webhooks.Timeout })),
	env("BOXOFFICE_WEBHOOK_RETENTION").Default("720h").
		Means("how long webhook messages (payloads included) and their attempts are kept").
		Parse(positiveDuration("720h", func(c *Config) *time.Duration { return &c.Webhooks.Retention })),
	env("BOXOFFICE_WEBHOOK_DISABLE_AFTER").Default("120h").
		Means("an endpoint that failed every attempt this long is disabled").
		Parse(positiveDuration("120h", func(c *Config) *time.Duration { return &c.Webhooks.DisableAfter })),
	env("BOXOFFICE_WEBHOOK_SECRET_KEYS").Secret().Dev(DevWebhookSecretKeys).Shown("dev key in `dev`").
		Means("AES-256-GCM keys sealing organizers' endpoint secrets at rest: comma-separated `<key id>:<base64 of 32 bytes>` (e.g. `k2:$(head -c32 /dev/urandom \\| base64)`); the first seals, every one opens. Rotate by putting a new key first: `work` re-seals older rows (and plaintext ones from before sealing) within minutes; drop the old key once `boxoffice_webhook_secrets_unreadable` is 0 and no row names it, and no sooner than 24 hours after the new key came first (the answers kept for `Idempotency-Key` retries that carry a secret are sealed with these keys too, for 24 hours). Required by `serve` and `work`").
		Parse(func(v string, c *Config) (err error) {
			if v == "" {
				return nil
			}
			c.Webhooks.SecretKeys, err = webhooks.ParseKeyring(v)
			return err
		}),
	env("BOXOFFICE_LOG_LEVEL").Default("info").
		Means("`debug`, `info`, `warn`, `error`").
		Parse(func(v string, c *Config) error {
			return must(c.LogLevel.UnmarshalText([]byte(v)) == nil, "must be debug, info, warn or error")
		}),
	// Read by every consumer's Config (consumers.BatchSizeEnv).
	env(consumers.BatchSizeEnv).Default(strconv.Itoa(consumers.DefaultBatchSize)).
		Means("events one consumer applies in one transaction, at most (`make test-batch1` runs the tests at 1); a value that is not a positive number is refused when the consumers start"),
	// Read by the Go runtime, and by SetGCPercent when unset.
	env("GOGC").Default(strconv.Itoa(DefaultGCPercent)).
		Means("the garbage collector's target of `dev`, `serve`, `relay` and `work`, read by the Go runtime (`docs/performance.md`, \"GOGC and GOMEMLIMIT\"); `GOMEMLIMIT` bounds the heap where a container's memory is limited"),
}

// errAdmissionRateMax is BOXOFFICE_ADMISSION_RATE_MAX's problem.
const errAdmissionRateMax = "must be a number of admissions per second at least BOXOFFICE_ADMISSION_RATE"

// The failover's view of the old primary region.
const (
	primaryDatabaseURLVar = "BOXOFFICE_PRIMARY_DATABASE_URL"
	primaryNATSURLVar     = "BOXOFFICE_PRIMARY_NATS_URL"
)

// retryScheduleText is a retry schedule as BOXOFFICE_WEBHOOK_RETRY_SCHEDULE
// spells it.
func retryScheduleText(schedule []time.Duration) string {
	parts := make([]string, len(schedule))
	for i, d := range schedule {
		parts[i] = DurationText(d)
	}
	return strings.Join(parts, ",")
}

// secretVars are the variables that hold a secret (or a URL with a
// password in it): the settings marked Secret but the cells' URLs, whose
// names withSecretFiles makes from the cells. Each may instead be read
// from a file named by <VAR>_FILE, as container orchestrators mount
// secrets.
var secretVars = func() []string {
	var names []string
	for _, s := range settings {
		if s.secret && !strings.Contains(s.name, "<") {
			names = append(names, s.name)
		}
	}
	return names
}()

// devDefaults are the values `boxoffice dev` gives the settings that have
// one (setting.dev), when unset.
func devDefaults() map[string]string {
	m := map[string]string{}
	for _, s := range settings {
		if s.dev != "" {
			m[s.name] = s.dev
		}
	}
	return m
}

// The markers around the README's configuration table.
const (
	settingsBegin = "<!-- settings: generated by `boxoffice settings -readme README.md` (make generate) from cmd/boxoffice/roles/settings.go; edit them there -->"
	settingsEnd   = "<!-- settings: end -->"
)

// settingsMarkdown is the README's configuration table.
func settingsMarkdown() string {
	var b strings.Builder
	b.WriteString("| variable | meaning | default |\n|---|---|---|\n")
	for _, s := range settings {
		def := s.shown
		switch {
		case def != "":
		case s.def != "":
			def = "`" + s.def + "`"
		default:
			def = "—"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", s.name, s.meaning, def)
	}
	return b.String()
}

// withSettingsTable is readme with the text between its settings markers
// replaced by settingsMarkdown; an error if the markers are missing.
func withSettingsTable(readme string) (string, error) {
	before, rest, ok := strings.Cut(readme, settingsBegin+"\n")
	_, after, ok2 := strings.Cut(rest, settingsEnd)
	if !ok || !ok2 {
		return "", fmt.Errorf("no settings table: the lines %q and %q must surround it", settingsBegin, settingsEnd)
	}
	return before + settingsBegin + "\n" + settingsMarkdown() + settingsEnd + after, nil
}

// runSettings runs `boxoffice settings`: the environment variables, their
// defaults and meanings, as the README's Markdown table, or written into
// the README between its markers (-readme FILE, what make generate runs).
func runSettings(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("settings", flag.ContinueOnError)
	readme := fs.String("readme", "", "rewrite the configuration table of this Markdown file (between its settings markers) instead of printing it")
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	if *readme == "" {
		_, err := io.WriteString(out, settingsMarkdown())
		return err
	}
	old, err := os.ReadFile(*readme)
	if err != nil {
		return fmt.Errorf("read %s: %w", *readme, err)
	}
	updated, err := withSettingsTable(string(old))
	if err != nil {
		return fmt.Errorf("%s: %w", *readme, err)
	}
	if updated == string(old) {
		return nil
	}
	if err := os.WriteFile(*readme, []byte(updated), 0o644); err != nil { //nolint:gosec // a README, readable by all
		return fmt.Errorf("write %s: %w", *readme, err)
	}
	return nil
}
