package db

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports, at each scrape, the pool's wait for connections and
// how many database sessions are waiting on a lock (docs/design/signals.md:
// lock waits are the first sign of a hot seat or a lock-order bug).
type Collector struct {
	pool        *pgxpool.Pool
	acquireWait *prometheus.Desc
	acquired    *prometheus.Desc
	maxConns    *prometheus.Desc
	lockWaiting *prometheus.Desc
	deadlocks   *prometheus.Desc
}

// NewCollector returns a Collector for pool. Register it once per pool.
func NewCollector(pool *pgxpool.Pool) *Collector {
	return &Collector{
		pool: pool,
		acquireWait: prometheus.NewDesc("boxoffice_db_pool_acquire_wait_seconds_total",
			"Time spent waiting for a pooled connection (pgxpool AcquireDuration).", nil, nil),
		acquired: prometheus.NewDesc("boxoffice_db_pool_acquired_connections",
			"Pooled connections in use now.", nil, nil),
		maxConns: prometheus.NewDesc("boxoffice_db_pool_max_connections",
			"The pool's size: boxoffice_db_pool_acquired_connections over it is the pool's saturation.", nil, nil),
		lockWaiting: prometheus.NewDesc("boxoffice_db_lock_waiting_sessions",
			"Sessions of this database waiting on a lock now (pg_stat_activity).", nil, nil),
		deadlocks: prometheus.NewDesc("boxoffice_db_deadlocks_total",
			"Deadlocks PostgreSQL detected in this database since its statistics were reset (pg_stat_database).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.acquireWait
	ch <- c.acquired
	ch <- c.maxConns
	ch <- c.lockWaiting
	ch <- c.deadlocks
}

// Collect implements prometheus.Collector. When the lock query fails the
// lock gauge and the deadlock counter are left out of the scrape rather
// than reported as zero.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(c.acquireWait, prometheus.CounterValue, st.AcquireDuration().Seconds())
	ch <- prometheus.MustNewConstMetric(c.acquired, prometheus.GaugeValue, float64(st.AcquiredConns()))
	ch <- prometheus.MustNewConstMetric(c.maxConns, prometheus.GaugeValue, float64(st.MaxConns()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var waiting, deadlocks int64
	err := c.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_stat_activity
		        WHERE datname = current_database() AND wait_event_type = 'Lock'),
		       (SELECT coalesce(deadlocks, 0) FROM pg_stat_database WHERE datname = current_database())`).Scan(&waiting, &deadlocks)
	if err == nil {
		ch <- prometheus.MustNewConstMetric(c.lockWaiting, prometheus.GaugeValue, float64(waiting))
		ch <- prometheus.MustNewConstMetric(c.deadlocks, prometheus.CounterValue, float64(deadlocks))
	}
}
