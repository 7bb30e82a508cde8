package consumers

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	backoffpkg "boxoffice/platform/backoff"
)

// outcomeKind is what happened to one delivery of a message.
type outcomeKind int

const (
	// outcomeApplied: the handler ran and its transaction committed.
	outcomeApplied outcomeKind = iota + 1
	// outcomeDuplicate: the inbox already held the event; nothing ran.
	outcomeDuplicate
	// outcomeInvalid: the body is not a usable envelope.
	outcomeInvalid
	// outcomePermanent: the handler returned an error wrapping ErrPermanent.
	outcomePermanent
	// outcomeTransient: the handler or the transaction failed (or the
	// handler panicked); a later delivery may succeed.
	outcomeTransient
	// outcomeExhausted: the message came back after its last allowed
	// delivery; the handler was not run again.
	outcomeExhausted
	// outcomeInterrupted: shutdown canceled the handler before it finished.
	outcomeInterrupted
	// outcomeDeadLetterFailed: a dead letter could not be stored.
	outcomeDeadLetterFailed
	// outcomeNoEffect: a BatchFunc found nothing to apply (ErrNoEffect);
	// no transaction ran and no inbox row was written.
	outcomeNoEffect
)

var outcomeNames = map[outcomeKind]string{
	outcomeApplied:          "applied",
	outcomeDuplicate:        "duplicate",
	outcomeInvalid:          "invalid",
	outcomePermanent:        "permanent",
	outcomeTransient:        "transient",
	outcomeExhausted:        "exhausted",
	outcomeInterrupted:      "interrupted",
	outcomeDeadLetterFailed: "dead_letter_failed",
	outcomeNoEffect:         "no_effect",
}

func (k outcomeKind) String() string { return outcomeNames[k] }

// outcome is one delivery's result, the input of decide.
type outcome struct {
	kind outcomeKind
	// err is why, for every kind but applied and duplicate.
	err error
	// numDelivered is the delivery count JetStream reported.
	numDelivered uint64
}

// actionKind is what is done with a message.
type actionKind int

const (
	// actionAck acks without waiting for the server.
	actionAck actionKind = iota + 1
	// actionDoubleAck acks and waits for the server to confirm.
	actionDoubleAck
	// actionNak asks for redelivery after delay (at once when delay is 0).
	actionNak
	// actionDeadLetter stores the message on the dead-letter stream, then
	// terminates it.
	actionDeadLetter
)

var actionNames = map[actionKind]string{
	actionAck:        "ack",
	actionDoubleAck:  "double_ack",
	actionNak:        "nak",
	actionDeadLetter: "dead_letter",
}

func (k actionKind) String() string { return actionNames[k] }

// action is decide's answer.
type action struct {
	kind actionKind
	// delay before redelivery, for actionNak.
	delay time.Duration
	// reason is the dead letter's short, safe reason, for actionDeadLetter.
	reason string
}

// policy is the part of Config that decide needs.
type policy struct {
	maxDeliver uint64
	doubleAck  bool
	// backoffFunc is the delay before the delivery after attempt failed.
	backoffFunc func(attempt uint64) time.Duration
}

// decide is the one place that maps what happened to a delivery to what is
// done with the message (docs/design/consumers.md):
//
//	applied, duplicate, no effect        → ack (double ack when configured)
//	invalid, permanent, exhausted        → dead letter
//	transient, NumDelivered < MaxDeliver → nak after backoff(NumDelivered)
//	transient, NumDelivered ≥ MaxDeliver → dead letter
//	interrupted by shutdown              → nak at once, for another process
//	dead letter could not be stored      → nak after backoff(NumDelivered)
func decide(o outcome, p policy) action {
	switch o.kind {
	case outcomeApplied, outcomeDuplicate, outcomeNoEffect:
		if p.doubleAck {
			return action{kind: actionDoubleAck}
		}
		return action{kind: actionAck}
	case outcomeInvalid, outcomePermanent:
		return action{kind: actionDeadLetter, reason: reasonText(errText(o.err))}
	case outcomeTransient:
		if o.numDelivered >= p.maxDeliver {
			return action{kind: actionDeadLetter, reason: reasonText(fmt.Sprintf("gave up after %d deliveries: %s", o.numDelivered, errText(o.err)))}
		}
		return action{kind: actionNak, delay: p.backoffFunc(o.numDelivered)}
	case outcomeExhausted:
		return action{kind: actionDeadLetter, reason: fmt.Sprintf("gave up after %d deliveries", p.maxDeliver)}
	case outcomeInterrupted:
		return action{kind: actionNak}
	case outcomeDeadLetterFailed:
		return action{kind: actionNak, delay: p.backoffFunc(o.numDelivered)}
	}
	// Unreachable: every kind is handled above. Retrying is the safe answer.
	return action{kind: actionNak, delay: p.backoffFunc(o.numDelivered)}
}

// maxReasonBytes bounds a dead letter's reason.
const maxReasonBytes = 200

// errText is err's message, except for a panic, whose value may hold
// anything and is only logged.
func errText(err error) string {
	var pe *panicError
	switch {
	case err == nil:
		return "unknown"
	case errors.As(err, &pe):
		return "handler panicked"
	}
	return err.Error()
}

// reasonText makes s a dead-letter reason: one line of valid UTF-8, at
// most maxReasonBytes long, fit for a header.
func reasonText(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if len(s) > maxReasonBytes {
		s = s[:maxReasonBytes]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}

// retrySchedule is river's retry schedule, the documented nak delay
// (doc.go): base·attempt⁴ ±10%, capped at maxDelay after the jitter, so no
// delay exceeds maxDelay.
func retrySchedule(base, maxDelay time.Duration) backoffpkg.Policy {
	return backoffpkg.Policy{Base: base, Power: 4, Jitter: backoffpkg.Even(0.1), Limit: maxDelay}
}

// backoff is retrySchedule's delay after attempt with the jitter given (a
// fraction in [-0.1, 0.1]).
func backoff(attempt uint64, base, maxDelay time.Duration, jitter float64) time.Duration {
	return retrySchedule(base, maxDelay).DelayWith(attemptNumber(attempt), (jitter+0.1)/0.2)
}

// jitteredBackoff returns retrySchedule's delay with a random ±10% jitter.
func jitteredBackoff(base, maxDelay time.Duration) func(uint64) time.Duration {
	p := retrySchedule(base, maxDelay)
	return func(attempt uint64) time.Duration {
		return p.Delay(attemptNumber(attempt))
	}
}

// attemptNumber is attempt as an int, saturating (any attempt past 2⁶³
// is capped the same).
func attemptNumber(attempt uint64) int {
	return int(min(attempt, math.MaxInt))
}
