package webhooks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/platform/backoff"
	"boxoffice/platform/db"
	"boxoffice/platform/promreg"
	"boxoffice/sqlcgen"
)

// Resealer moves endpoint secrets onto the keyring's current key in the
// background: every secret and previous secret sealed under another key,
// and every legacy plaintext one, is sealed anew under the current key,
// in batches of BatchSize endpoints, each batch in its own short
// transaction that locks only its rows (others are skipped and taken in
// the next pass). A previous secret whose overlap has ended is dropped
// instead. A stored value no key opens is left as it is, logged by
// endpoint id and counted in boxoffice_webhook_secrets_unreadable; the
// dispatcher fails that endpoint's attempts until its secret is rotated.
//
// Several Resealers (one per work process) may run at once: each row is
// re-sealed under a lock, from what it holds then.
type Resealer struct {
	pool       *pgxpool.Pool
	cfg        ResealerConfig
	logger     *slog.Logger
	q          *sqlcgen.Queries
	resealed   prometheus.Counter
	unreadable prometheus.Gauge
}

// ResealerConfig configures a Resealer.
type ResealerConfig struct {
	// Keys is the keyring; its current key is what secrets are moved
	// onto. Required.
	Keys *Keyring
	// Interval is the pause between passes; the first pass runs at start.
	// Defaults to 10m.
	Interval time.Duration
	// BatchSize is how many endpoints one transaction re-seals. Defaults
	// to 100.
	BatchSize int
	// Logger receives the resealer's logs. Required.
	Logger *slog.Logger
	// Registerer receives its metrics. Defaults to none.
	Registerer prometheus.Registerer
}

// NewResealer returns a Resealer, or an error naming what cfg lacks.
func NewResealer(pool *pgxpool.Pool, cfg ResealerConfig) (*Resealer, error) {
	cfg.Interval = cmp.Or(cfg.Interval, 10*time.Minute)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 100)
	var errs []error
	if pool == nil {
		errs = append(errs, errors.New("pool is required"))
	}
	if cfg.Keys == nil {
		errs = append(errs, errors.New("Keys is required"))
	}
	if cfg.Logger == nil {
		errs = append(errs, errors.New("Logger is required"))
	}
	if cfg.Interval <= 0 || cfg.BatchSize < 1 {
		errs = append(errs, errors.New("Interval and BatchSize must be positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("webhook secret resealer config: %w", err)
	}
	return &Resealer{
		pool: pool, cfg: cfg, logger: cfg.Logger.With("component", "webhooks_secrets"), q: sqlcgen.New(),
		resealed: promreg.Counter(cfg.Registerer, "boxoffice_webhook_secrets_resealed_total",
			"Endpoint secrets sealed anew under the current key (legacy plaintext or an older key), or expired previous secrets dropped."),
		unreadable: promreg.Gauge(cfg.Registerer, "boxoffice_webhook_secrets_unreadable",
			"Endpoints whose stored secret no configured key opens, as the last re-sealing pass found them."),
	}, nil
}

// Run re-seals at start and then every Interval until ctx is done, then
// returns nil.
func (r *Resealer) Run(ctx context.Context) error {
	backoff.Every(ctx, r.cfg.Interval, func(ctx context.Context) {
		n, bad, err := r.Pass(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			r.logger.ErrorContext(ctx, "re-seal webhook secrets", "error", err.Error())
		case n > 0 || bad > 0:
			r.logger.InfoContext(ctx, "re-sealed webhook secrets", "endpoints", n, "unreadable", bad, "key_id", r.cfg.Keys.CurrentKeyID())
		}
	})
	return nil
}

// Pass visits every endpoint not sealed under the current key once and
// re-seals what it can. Returns how many endpoints it changed and how many
// it could not read.
func (r *Resealer) Pass(ctx context.Context) (changed, unreadable int, err error) {
	after := uuid.Nil
	for {
		var n, bad, seen int
		var last uuid.UUID
		err := db.WithTx(ctx, r.pool, func(ctx context.Context, tx pgx.Tx) error {
			rows, err := r.q.WebhookEndpointSecretsToReseal(ctx, tx, sqlcgen.WebhookEndpointSecretsToResealParams{
				After: after, Prefix: r.cfg.Keys.currentPrefix(), MaxRows: int32(r.cfg.BatchSize),
			})
			if err != nil {
				return fmt.Errorf("lock endpoints to re-seal: %w", err)
			}
			seen = len(rows)
			for _, row := range rows {
				last = row.ID
				p, ok := r.reseal(ctx, row)
				if !ok {
					bad++
					continue
				}
				if err := r.q.WebhookEndpointReseal(ctx, tx, p); err != nil {
					return fmt.Errorf("re-seal endpoint secret: %w", err)
				}
				n++
			}
			return nil
		})
		if err != nil {
			return changed, unreadable, err
		}
		changed += n
		unreadable += bad
		r.resealed.Add(float64(n))
		if seen < r.cfg.BatchSize {
			r.unreadable.Set(float64(unreadable))
			return changed, unreadable, nil
		}
		after = last
	}
}

// reseal returns the endpoint's secrets sealed under the current key, or
// false when its secret cannot be opened (then nothing about it changes).
// A previous secret that cannot be opened, or whose overlap is over, is
// dropped: it no longer signs anyway.
func (r *Resealer) reseal(ctx context.Context, row sqlcgen.WebhookEndpointSecretsToResealRow) (sqlcgen.WebhookEndpointResealParams, bool) {
	k := r.cfg.Keys
	plain, err := k.Open(row.ID, row.Secret)
	if err != nil {
		r.logger.WarnContext(ctx, "webhook endpoint secret cannot be opened; rotate it", "endpoint_id", row.ID.String(), "reason", secretReason(err))
		return sqlcgen.WebhookEndpointResealParams{}, false
	}
	p := sqlcgen.WebhookEndpointResealParams{ID: row.ID}
	if p.Secret, err = k.Seal(row.ID, plain); err != nil {
		return p, false
	}
	if row.PreviousSecret != nil && row.PreviousSecretExpiresAt != nil && time.Now().Before(*row.PreviousSecretExpiresAt) {
		prev, err := k.Open(row.ID, *row.PreviousSecret)
		if err == nil {
			sealed, err := k.Seal(row.ID, prev)
			if err != nil {
				return p, false
			}
			p.PreviousSecret = &sealed
		}
	}
	return p, true
}
