package handlers

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"boxoffice/domain/cells"
	"boxoffice/domain/purchase"
	"boxoffice/domain/waitingroom"
)

// OnsaleSignals are the release controller's last readings.
type OnsaleSignals struct {
	HoldP99Ms        int64 `json:"holdP99Ms"`
	PoolWaitMs       int64 `json:"poolWaitMs"`
	OutboxAgeSeconds int64 `json:"outboxAgeSeconds"`
	ConsumerPending  int64 `json:"consumerPending"`
	ActiveHolds      int64 `json:"activeHolds"`
}

// OnsaleBody is an onsale's settings and admission state.
type OnsaleBody struct {
	EventID         uuid.UUID     `json:"eventId"`
	Phase           string        `json:"phase" enum:"scheduled,open,paused"`
	OpensAt         *time.Time    `json:"opensAt,omitempty" doc:"When a scheduled onsale opens."`
	Paused          bool          `json:"paused"`
	MaxRate         int           `json:"maxRate" doc:"The organizer's cap on admissions per second; 0: none."`
	SeatLimit       int           `json:"seatLimit" doc:"Seats one buyer may hold or own in the event; 0: no limit."`
	PaymentAttempts int           `json:"paymentAttempts" doc:"How many times a buyer may try to pay for an order; a decline before the last leaves the order awaiting payment with its seats."`
	HoldTTLSeconds  int           `json:"holdTtlSeconds" doc:"How long a hold of the event lasts, in seconds; 0: the deployment's default (BOXOFFICE_HOLD_TTL)."`
	AdmissionRate   float64       `json:"admissionRate" doc:"R: admissions per second now, the cell's (the lowest release-controller rate its API processes reported in the last 1.5 s) capped by maxRate."`
	ControllerRate  float64       `json:"controllerRate" doc:"The release controller's rate of the API process that answered: each process adapts its own to what it measures, and the cell admits at the lowest."`
	RateReason      string        `json:"rateReason" doc:"Why R last changed: initial, healthy, the signal over its threshold (hold_p99, pool_wait, outbox_age, consumer_pending, active_holds, lock_waits, deadlocks, publish_retries, expiry_delay, sched_latency), or signals_unavailable when some signals could not be read and none that could was over its threshold."`
	RateDetail      string        `json:"rateDetail,omitempty"`
	RateChangedAt   time.Time     `json:"rateChangedAt"`
	Queued          *int64        `json:"queued,omitempty" doc:"Buyers waiting; absent while the waiting room's store is unreachable."`
	Signals         OnsaleSignals `json:"signals"`
}

// OnsaleOutput is an onsale's state.
type OnsaleOutput struct {
	Body OnsaleBody
}

// PatchOnsaleInput changes an onsale's settings; absent fields keep their
// value.
type PatchOnsaleInput struct {
	EventPathInput
	Body struct {
		OpensAt         *time.Time `json:"opensAt,omitempty" doc:"Schedule the opening: buyers who join before it are shuffled at random when it opens. A past time opens at once."`
		Paused          *bool      `json:"paused,omitempty" doc:"Pause (true) or resume (false) admissions."`
		MaxRate         *int       `json:"maxRate,omitempty" minimum:"0" maximum:"100000" doc:"Cap on admissions per second; 0 removes the cap."`
		SeatLimit       *int       `json:"seatLimit,omitempty" minimum:"0" maximum:"1000" doc:"Seats one buyer may hold or own; 0 removes the limit."`
		PaymentAttempts *int       `json:"paymentAttempts,omitempty" minimum:"0" maximum:"10" doc:"How many times a buyer may try to pay for an order, 1 to 10; 0 restores the default (3)."`
		HoldTTLSeconds  *int       `json:"holdTtlSeconds,omitempty" minimum:"0" maximum:"1800" doc:"How long a hold of the event lasts, 60 to 1800 seconds; 0 restores the deployment's default. Holds made before keep their expiry."`
	}
}

// RevokeAdmissionInput names the buyer whose admission to revoke.
type RevokeAdmissionInput struct {
	EventPathInput
	Body struct {
		UserID uuid.UUID `json:"userId" doc:"The buyer (the sub of their bearer token)."`
	}
}

func (h *Handlers) revokeAdmission(ctx context.Context, in *RevokeAdmissionInput) (*struct{}, error) {
	c, eventID, _, err := h.organizerOnsale(ctx, in.EventID, nil)
	if err != nil {
		return nil, err
	}
	had, err := c.Room.RevokeBuyer(ctx, eventID, in.Body.UserID)
	switch {
	case errors.Is(err, waitingroom.ErrUnavailable):
		return nil, huma.ErrorWithHeaders(problem(http.StatusServiceUnavailable, TypeUnavailable,
			"The waiting room cannot be reached; try again shortly."), retryAfter(5*time.Second))
	case err != nil:
		return nil, h.internal(ctx, "revoke admission", err, "event_id", eventID)
	case !had:
		return nil, problem(http.StatusNotFound, TypeNotFound, "This buyer holds no admission to this event.")
	}
	h.logger.InfoContext(ctx, "admission revoked", "correlation_id", CorrelationID(ctx), "event_id", eventID, "user_id", in.Body.UserID)
	return nil, nil
}

// organizerOnsale is how every onsale operation starts: the event of the
// path, its cell, and its onsale, changed first when change is not nil,
// if the caller organizes the event (waitingroom.Room.OrganizerOnsale).
// Otherwise it returns the 422, 404 or 503 problem; for anyone but the
// organizer the event does not exist.
func (h *Handlers) organizerOnsale(ctx context.Context, raw string, change func(*waitingroom.Settings)) (*cells.Cell, uuid.UUID, waitingroom.Onsale, error) {
	c, eventID, err := h.eventPath(ctx, raw)
	if err != nil {
		return nil, eventID, waitingroom.Onsale{}, err
	}
	o, err := c.Room.OrganizerOnsale(ctx, identity(ctx).OrganizerID, eventID, change)
	if err != nil {
		return nil, eventID, o, h.problemFor(ctx, err, "onsale", "No such event.", "event_id", eventID)
	}
	return c, eventID, o, nil
}

// ownOnsale returns the event's onsale, changed first when change is not
// nil, if the caller organizes it (organizerOnsale).
func (h *Handlers) ownOnsale(ctx context.Context, raw string, change func(*waitingroom.Settings)) (*OnsaleOutput, error) {
	_, eventID, o, err := h.organizerOnsale(ctx, raw, change)
	if err != nil {
		return nil, err
	}
	s, c := o.Event.Settings, o.Control
	out := &OnsaleOutput{Body: OnsaleBody{
		EventID: eventID, Phase: string(o.Phase), OpensAt: s.OpensAt, Paused: s.Paused, MaxRate: s.MaxRate, SeatLimit: s.SeatLimit,
		PaymentAttempts: cmp.Or(s.PaymentAttempts, purchase.DefaultPaymentAttempts),
		HoldTTLSeconds:  int(s.HoldTTL / time.Second),
		AdmissionRate:   o.Rate, ControllerRate: c.Rate, RateReason: c.Reason, RateDetail: c.Detail, RateChangedAt: c.ChangedAt.UTC(),
		Signals: OnsaleSignals{
			HoldP99Ms: c.Signals.HoldP99.Milliseconds(), PoolWaitMs: c.Signals.PoolWait.Milliseconds(),
			OutboxAgeSeconds: int64(c.Signals.OutboxAge.Seconds()), ConsumerPending: c.Signals.ConsumerPending, ActiveHolds: c.Signals.ActiveHolds,
		},
	}}
	if o.QueueErr == nil {
		out.Body.Queued = &o.Queued
	}
	return out, nil
}

func (h *Handlers) getOnsale(ctx context.Context, in *EventPathInput) (*OnsaleOutput, error) {
	return h.ownOnsale(ctx, in.EventID, nil)
}

func (h *Handlers) patchOnsale(ctx context.Context, in *PatchOnsaleInput) (*OnsaleOutput, error) {
	b := in.Body
	if b.HoldTTLSeconds != nil && *b.HoldTTLSeconds > 0 && *b.HoldTTLSeconds < 60 {
		return nil, invalid("body.holdTtlSeconds", "a hold lasts at least 60 seconds; 0 restores the default")
	}
	return h.ownOnsale(ctx, in.EventID, func(s *waitingroom.Settings) {
		if b.OpensAt != nil {
			t := b.OpensAt.UTC()
			s.OpensAt = &t
		}
		if b.Paused != nil {
			s.Paused = *b.Paused
		}
		if b.MaxRate != nil {
			s.MaxRate = *b.MaxRate
		}
		if b.SeatLimit != nil {
			s.SeatLimit = *b.SeatLimit
		}
		if b.PaymentAttempts != nil {
			s.PaymentAttempts = *b.PaymentAttempts
		}
		if b.HoldTTLSeconds != nil {
			s.HoldTTL = time.Duration(*b.HoldTTLSeconds) * time.Second
		}
	})
}
