package failover

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric descriptions of Collector.
var (
	descUp = prometheus.NewDesc("boxoffice_failover_standby_up",
		"1 when the last scrape read the standby's database and stream copies, else 0.", nil, nil)
	descPromoted = prometheus.NewDesc("boxoffice_failover_standby_promoted",
		"1 once the standby database is promoted (no longer in recovery).", nil, nil)
	descReplayLag = prometheus.NewDesc("boxoffice_failover_replica_replay_lag_bytes",
		"WAL the primary has written that the standby has not replayed; absent when the primary does not answer.", nil, nil)
	descReplayAge = prometheus.NewDesc("boxoffice_failover_replica_last_replay_age_seconds",
		"Time since the commit of the last transaction the standby replayed; grows on an idle primary too, so alert on the bytes.", nil, nil)
	descCopyLag = prometheus.NewDesc("boxoffice_failover_stream_copy_lag_messages",
		"Messages of the primary's stream the standby's copy lacks (exact when the primary's bus answers, else the mirror's last report).",
		[]string{"stream"}, nil)
	descCopyContact = prometheus.NewDesc("boxoffice_failover_stream_copy_contact_age_seconds",
		"How long ago the standby's mirror last heard from the primary's stream: a growing value means the link is down.",
		[]string{"stream"}, nil)
)

// Collector exports the recovery point a failover would have now: the
// standby's replica replay lag and stream copy lag, measured (Measure) at
// each scrape, within Timeout. It is what `boxoffice failover watch` serves
// from the standby region.
type Collector struct {
	// Sources are where the lag is read.
	Sources Sources
	// Timeout bounds one measurement. Defaults to 5s.
	Timeout time.Duration
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descPromoted, descReplayLag, descReplayAge, descCopyLag, descCopyContact} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one measurement per scrape. A
// measurement that fails reports boxoffice_failover_standby_up 0 and
// nothing else.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rp, err := Measure(ctx, c.Sources)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1)
	promoted := 0.0
	if !rp.InRecovery {
		promoted = 1
	}
	ch <- prometheus.MustNewConstMetric(descPromoted, prometheus.GaugeValue, promoted)
	if rp.ReplayLagBytes != nil {
		ch <- prometheus.MustNewConstMetric(descReplayLag, prometheus.GaugeValue, float64(*rp.ReplayLagBytes))
	}
	if rp.LastReplayedCommitAt != nil {
		ch <- prometheus.MustNewConstMetric(descReplayAge, prometheus.GaugeValue, rp.MeasuredAt.Sub(*rp.LastReplayedCommitAt).Seconds())
	}
	for i, s := range rp.Streams {
		lag := float64(s.Lag)
		if i == 0 {
			lag = float64(rp.StreamLag)
		}
		if s.Mirror {
			ch <- prometheus.MustNewConstMetric(descCopyLag, prometheus.GaugeValue, lag, s.Stream)
			ch <- prometheus.MustNewConstMetric(descCopyContact, prometheus.GaugeValue, s.Active.Seconds(), s.Stream)
		}
	}
}
