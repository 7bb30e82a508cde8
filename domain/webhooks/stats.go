// This file owns the gauges: the oldest pending delivery, endpoints by
// circuit state, and deliveries needing review, refreshed every
// statsInterval.

package webhooks

import (
	"context"
	"errors"
	"time"
)

// statsInterval is how often the gauges are refreshed.
const statsInterval = 5 * time.Second

// refreshStats reads the gauges' values and sets them; Run calls it every
// statsInterval.
func (d *Dispatcher) refreshStats(ctx context.Context) {
	age, err := d.q.WebhookDeliveryStats(ctx, d.pool)
	if err == nil {
		d.metrics.oldestPending.Set(age)
	}
	c, err2 := d.q.WebhookEndpointCircuitCounts(ctx, d.pool)
	if err2 == nil {
		d.metrics.endpointsByState.WithLabelValues(circuitClosed).Set(float64(c.Closed))
		d.metrics.endpointsByState.WithLabelValues(circuitOpen).Set(float64(c.Open))
		d.metrics.endpointsByState.WithLabelValues(circuitHalfOpen).Set(float64(c.HalfOpen))
		d.metrics.endpointsByState.WithLabelValues("disabled").Set(float64(c.Disabled))
	}
	review, err3 := d.q.WebhookDeliveryReviewCount(ctx, d.pool)
	if err3 == nil {
		d.metrics.needingReview.Set(float64(review))
	}
	if err := errors.Join(err, err2, err3); err != nil && ctx.Err() == nil {
		d.logger.WarnContext(ctx, "refresh webhook gauges", "error", err.Error())
	}
}
