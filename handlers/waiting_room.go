package handlers

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"boxoffice/domain/waitingroom"
)

// WaitingRoomInput names the event and captures the client's address for
// the per-address rate limit.
type WaitingRoomInput struct {
	EventPathInput
	ip string
	// presaleCode is the X-Presale-Code header, read on join only: a
	// header, never the URL, since it admits to a presale (invariant 7).
	// It is read in Resolve rather than declared as a parameter so that
	// the generated clients' signatures stay as they were (a declared
	// header turns their trailing editors into a params struct); the
	// operation's description documents it.
	presaleCode string
}

// Resolve records the client address of the connection. Behind a proxy
// this is the proxy's: put the per-address limit at the proxy instead.
func (in *WaitingRoomInput) Resolve(ctx huma.Context) []error {
	if code := ctx.Header("X-Presale-Code"); len(code) <= 64 {
		in.presaleCode = code
	}
	in.ip = ctx.RemoteAddr()
	if host, _, err := net.SplitHostPort(in.ip); err == nil {
		in.ip = host
	}
	return nil
}

// WaitingRoomBody is a buyer's place in the waiting room.
type WaitingRoomBody struct {
	Status string `json:"status" enum:"queued,admitted,revoked" doc:"queued: poll GET until admitted. admitted: hold seats with admissionToken until expiresAt. revoked: the organizer revoked your admission; no token, holds are refused, and you may join again after expiresAt."`
	Phase  string `json:"phase" enum:"scheduled,open,paused,sold_out" doc:"scheduled: the onsale has not opened; the pre-queue is shuffled at random when it does. paused: nobody is admitted until the organizer resumes. sold_out: the onsale is open but no seat is available or held; you keep your place on the waiting list and are admitted, in queue order, if seats come back (a refund that resells them). While seats are only held, the phase stays open: holds that expire or fail bring seats back, and about as many queued buyers as seats came back are admitted."`
	// Position is 1 for the next buyer to be admitted.
	Position             int64      `json:"position,omitempty" doc:"Queued only: 1 is next. Before a scheduled opening the pre-queue is in random order and later joiners may be placed ahead."`
	EstimatedWaitSeconds int64      `json:"estimatedWaitSeconds,omitempty" doc:"Queued while open: position at the current admission rate. Absent while more buyers are ahead of you than seats are left to hold: then only holds that end (expired, declined, canceled) can admit you, and when is not known."`
	PollAfterSeconds     int64      `json:"pollAfterSeconds,omitempty" doc:"Queued only: poll again after this many seconds (also sent as Retry-After): half your estimated wait, 1 to 30 seconds, so polls far back in the queue are rare and polls near the front frequent."`
	OpensAt              *time.Time `json:"opensAt,omitempty" doc:"When a scheduled onsale opens."`
	AdmissionToken       string     `json:"admissionToken,omitempty" doc:"Admitted only. Send as X-Admission-Token on holds. Bound to you, this event and its purchase cell."`
	ExpiresAt            *time.Time `json:"expiresAt,omitempty" doc:"Admitted: when the admission token expires. Revoked: when the revoked admission would have expired; join again after it."`
}

// WaitingRoomOutput is a buyer's place in the waiting room: 200 once
// admitted (or revoked), 202 while queued.
type WaitingRoomOutput struct {
	Status int
	// RetryAfter repeats pollAfterSeconds while queued, for clients that
	// honour the standard header rather than the body.
	RetryAfter      string `header:"Retry-After" doc:"Queued only: the same as pollAfterSeconds."`
	RateLimitPolicy string `header:"RateLimit-Policy" doc:"The buyer's waiting-room request budget (IETF httpapi RateLimit draft): \"waiting-room\";q=<requests a second>;w=1. Absent where it is not limited."`
	RateLimit       string `header:"RateLimit" doc:"What is left of it after this request: \"waiting-room\";r=<requests left this second>;t=1."`
	Body            WaitingRoomBody
}

// roomBudget is the buyer's waiting-room budget after a request that was
// the used-th of its one-second window: the RateLimit-Policy and
// RateLimit field values, empty when the per-buyer limit is off. A client
// address shared by many buyers has its own, wider bound, not shown.
func roomBudget(limit, used int) (policy, state string) {
	if limit <= 0 {
		return "", ""
	}
	return budget{quota: limit, window: 1, remaining: max(0, limit-used), reset: 1}.headers("waiting-room")
}

func (h *Handlers) joinWaitingRoom(ctx context.Context, in *WaitingRoomInput) (*WaitingRoomOutput, error) {
	return h.waitingRoom(ctx, in, true)
}

func (h *Handlers) pollWaitingRoom(ctx context.Context, in *WaitingRoomInput) (*WaitingRoomOutput, error) {
	return h.waitingRoom(ctx, in, false)
}

// retryAfter is the Retry-After header for d, in whole seconds, at least 1.
func retryAfter(d time.Duration) http.Header {
	return http.Header{"Retry-After": {strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))}}
}

func (h *Handlers) waitingRoom(ctx context.Context, in *WaitingRoomInput, join bool) (*WaitingRoomOutput, error) {
	c, eventID, err := h.eventPath(ctx, in.EventID)
	if err != nil {
		return nil, err
	}
	var v waitingroom.View
	if join {
		v, err = c.Room.JoinWithCode(ctx, identity(ctx).UserID, eventID, in.ip, in.presaleCode)
	} else {
		v, err = c.Room.Poll(ctx, identity(ctx).UserID, eventID, in.ip)
	}
	switch {
	case errors.Is(err, waitingroom.ErrUnavailable): // its own detail: tokens issued keep working
		h.logger.WarnContext(ctx, "waiting room unavailable", "correlation_id", CorrelationID(ctx), "event_id", eventID, "error", err.Error())
		return nil, huma.ErrorWithHeaders(problem(http.StatusServiceUnavailable, TypeUnavailable,
			"The waiting room is not admitting anyone right now; try again shortly. Admission tokens already issued keep working."),
			retryAfter(5*time.Second))
	case err != nil:
		return nil, h.problemFor(ctx, err, "waiting room", "No such event.", "event_id", eventID)
	}
	policy, state := roomBudget(c.Room.Limits().PerUser, v.Used)
	out := &WaitingRoomOutput{Status: http.StatusAccepted, RateLimitPolicy: policy, RateLimit: state}
	out.Body.Phase = string(v.Phase)
	if v.SoldOut {
		out.Body.Phase = "sold_out"
	}
	out.Body.OpensAt = v.OpensAt
	switch v.Status {
	case waitingroom.StatusLimited:
		headers := retryAfter(v.RetryAfter)
		if policy != "" {
			headers.Set("RateLimit-Policy", policy)
			headers.Set("RateLimit", state)
		}
		return nil, huma.ErrorWithHeaders(problem(http.StatusTooManyRequests, TypeRateLimited,
			"Too many waiting-room requests; slow down."), headers)
	case waitingroom.StatusNone:
		return nil, problem(http.StatusNotFound, TypeNotFound, "You are not in this event's waiting room; join it first.")
	case waitingroom.StatusAdmitted:
		out.Status = http.StatusOK
		out.Body.Status = "admitted"
		out.Body.AdmissionToken = v.Token
		exp := v.ExpiresAt.UTC()
		out.Body.ExpiresAt = &exp
	case waitingroom.StatusRevoked:
		out.Status = http.StatusOK
		out.Body.Status = "revoked"
		exp := v.ExpiresAt.UTC()
		out.Body.ExpiresAt = &exp
	case waitingroom.StatusQueued:
		out.Body.Status = "queued"
		out.Body.Position = v.Position
		out.Body.EstimatedWaitSeconds = int64(math.Ceil(v.EstimatedWait.Seconds()))
		out.Body.PollAfterSeconds = int64(math.Ceil(v.PollAfter.Seconds()))
		out.RetryAfter = strconv.FormatInt(out.Body.PollAfterSeconds, 10)
	}
	return out, nil
}
