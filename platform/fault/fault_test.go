package fault_test

import (
	"errors"
	"fmt"
	"testing"

	"boxoffice/platform/fault"
)

func TestSentinelsAreDistinctAndCoded(t *testing.T) {
	a := fault.New(fault.CodeNotFound, "event not found")
	b := fault.New(fault.CodeNotFound, "event not found")
	if errors.Is(a, b) || errors.Is(b, a) {
		t.Fatal("two sentinels with the same code and message must stay distinct")
	}
	wrapped := fmt.Errorf("get event: %w", a)
	if !errors.Is(wrapped, a) {
		t.Fatal("errors.Is must see a wrapped sentinel")
	}
	if got := fault.CodeOf(wrapped); got != fault.CodeNotFound {
		t.Fatalf("CodeOf(wrapped) = %v, want CodeNotFound", got)
	}
	if wrapped.Error() != "get event: event not found" {
		t.Fatalf("message = %q", wrapped.Error())
	}
}

func TestCodeOf(t *testing.T) {
	conflict := fault.New(fault.CodeConflict, "seat taken")
	for _, tc := range []struct {
		name string
		err  error
		want fault.Code
	}{
		{"nil", nil, fault.CodeUnknown},
		{"uncoded", errors.New("boom"), fault.CodeUnknown},
		{"coded", conflict, fault.CodeConflict},
		{"joined after an uncoded one", errors.Join(errors.New("boom"), conflict), fault.CodeConflict},
		{"permanent wins over what it wraps", fault.Permanent(conflict), fault.CodePermanent},
		{"permanent nil", fault.Permanent(nil), fault.CodePermanent},
		{"outermost code wins", fmt.Errorf("%w: %w", fault.New(fault.CodeUnavailable, "down"), conflict), fault.CodeUnavailable},
	} {
		if got := fault.CodeOf(tc.err); got != tc.want {
			t.Errorf("%s: CodeOf = %v, want %v", tc.name, got, tc.want)
		}
	}
	if !errors.Is(fault.Permanent(conflict), conflict) || !errors.Is(fault.Permanent(conflict), fault.ErrPermanent) {
		t.Fatal("Permanent must wrap both ErrPermanent and its argument")
	}
	if fault.ErrPermanent.Error() != "permanent failure" {
		t.Fatalf("ErrPermanent's message changed: %q", fault.ErrPermanent.Error())
	}
}

func TestCodeString(t *testing.T) {
	if fault.CodeNotFound.String() != "not found" || fault.Code(99).String() != "Code(99)" {
		t.Fatal("Code.String")
	}
}

// A ValidationError, wrapped, is still found by errors.As and coded
// invalid: what the HTTP edge relies on to answer 422 naming the input,
// whichever domain package made it.
func TestValidationError(t *testing.T) {
	err := fmt.Errorf("create endpoint: %w", &fault.ValidationError{Location: "body.url", Message: "expected https"})
	var v *fault.ValidationError
	if !errors.As(err, &v) || v.Location != "body.url" || v.Message != "expected https" {
		t.Fatalf("errors.As = %v, %+v", errors.As(err, &v), v)
	}
	if got := fault.CodeOf(err); got != fault.CodeInvalid {
		t.Fatalf("CodeOf = %v, want CodeInvalid", got)
	}
	if err.Error() != "create endpoint: body.url: expected https" {
		t.Fatalf("message = %q", err.Error())
	}
}
