// Package fault holds the errors every layer shares the meaning of.
//
// A domain error carries a Code: what kind of failure it is, whichever
// package declared it (CodeNotFound, CodeConflict, CodeInvalid, CodeForbidden,
// CodeUnavailable, CodePermanent). A package declares its sentinels with New, so
// that errors.Is keeps telling them apart while CodeOf tells the edge (the
// HTTP problem table, the consumer runtime) how to answer any of them
// without knowing the package.
//
// ErrPermanent is the one notion of "no retry can fix this": a domain step
// returns it for an event it can never apply (a payload that does not
// decode, an unknown order), and the consumer runtime dead-letters any
// message whose handler error wraps it, whichever package the handler
// lives in.
package fault

import (
	"errors"
	"fmt"
)

// Code is the kind of a failure, as every layer understands it.
type Code int

// The codes. The zero Code is CodeUnknown: an error that carries no code
// (a bug, an I/O failure) is the server's fault, never the caller's.
const (
	// CodeUnknown: no code was given; the edge treats it as internal.
	CodeUnknown Code = iota
	// CodeNotFound: the thing asked for does not exist, or is not the
	// caller's to see.
	CodeNotFound
	// CodeConflict: the request contradicts the current state (a seat taken,
	// a key reused, an order past the step asked for).
	CodeConflict
	// CodeInvalid: the request breaks a rule of the domain; asking again
	// unchanged fails again.
	CodeInvalid
	// CodeForbidden: the caller may not do this.
	CodeForbidden
	// CodeUnavailable: a dependency does not answer; the same request may
	// succeed later.
	CodeUnavailable
	// CodePermanent: no retry can fix this (see ErrPermanent).
	CodePermanent
)

var codeNames = [...]string{
	CodeUnknown: "unknown", CodeNotFound: "not found", CodeConflict: "conflict", CodeInvalid: "invalid",
	CodeForbidden: "forbidden", CodeUnavailable: "unavailable", CodePermanent: "permanent",
}

// String is the code's name ("not found").
func (c Code) String() string {
	if c < 0 || int(c) >= len(codeNames) {
		return fmt.Sprintf("Code(%d)", int(c))
	}
	return codeNames[c]
}

// Coder is implemented by an error that carries a Code: the sentinels New
// returns, and domain error types (a seat-unavailable error naming the
// seats) that want one.
type Coder interface {
	error
	Code() Code
}

// sentinel is a coded error with a fixed message. It is compared by
// pointer, so two sentinels with the same code and message stay distinct
// for errors.Is.
type sentinel struct {
	code Code
	msg  string
}

func (s *sentinel) Error() string { return s.msg }
func (s *sentinel) Code() Code    { return s.code }

// New returns a new sentinel error with code and message msg: errors.Is
// matches it (and any error wrapping it) only against itself, and CodeOf
// of anything wrapping it is code.
func New(code Code, msg string) error { return &sentinel{code: code, msg: msg} }

// CodeOf returns the code of the first error in err's chain (depth first,
// as errors.As walks it) that carries one, or Unknown when none does or
// err is nil.
func CodeOf(err error) Code {
	var c Coder
	if errors.As(err, &c) {
		return c.Code()
	}
	return CodeUnknown
}

// ErrPermanent marks an error that no retry can fix: CodePermanent's
// sentinel. Wrap it with Permanent, or with fmt.Errorf("…: %w",
// ErrPermanent).
//
// A consumer dead-letters a message whose handler returns it, and the
// error's message becomes the dead letter's Boxoffice-Reason header and
// the termination reason JetStream advertises, cut to 200 bytes: like
// every error message it must hold no secrets, tokens or card data, and
// no payload bytes.
var ErrPermanent = New(CodePermanent, "permanent failure")

// Permanent wraps err so that it is permanent. errors.Is(Permanent(err),
// err) holds, and CodeOf(Permanent(err)) is CodePermanent. Permanent(nil) is
// ErrPermanent.
func Permanent(err error) error {
	if err == nil {
		return ErrPermanent
	}
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}

// ValidationError says which input is well-formed but not acceptable, and
// why: the one error of a rule broken by a caller's input, whichever
// domain package decides the rule. Its code is CodeInvalid, and the HTTP
// edge answers it with a 422 naming Location. Nothing was written.
type ValidationError struct {
	// Location names the input, such as body.url.
	Location string
	// Message says what is wrong, in words safe to show the client.
	Message string
}

func (e *ValidationError) Error() string { return e.Location + ": " + e.Message }

// Code is CodeInvalid: the input breaks a rule.
func (e *ValidationError) Code() Code { return CodeInvalid }
