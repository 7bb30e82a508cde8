package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/catalog"
	"boxoffice/domain/cells"
	"boxoffice/domain/purchase"
	"boxoffice/domain/waitingroom"
	"boxoffice/domain/webhooks"
	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/platform/page"
)

// The one problem table: every domain error is answered by its specific
// problem or by its code, wrapped or not, and never with its text; an
// uncoded or permanent error is the generic 500.
func TestProblemFor(t *testing.T) {
	t.Parallel()
	h := &Handlers{logger: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	seat := uuid.New()
	for _, tc := range []struct {
		err        error
		status     int
		typ        string
		detail     string
		retryAfter bool
	}{
		{catalog.ErrNotFound, http.StatusNotFound, TypeNotFound, "the detail", false},
		{waitingroom.ErrEventNotFound, http.StatusNotFound, TypeNotFound, "the detail", false},
		{purchase.ErrOrderNotFound, http.StatusNotFound, TypeNotFound, "the detail", false},
		{webhooks.ErrNotFound, http.StatusNotFound, TypeNotFound, "the detail", false},
		{cells.ErrNotFound, http.StatusNotFound, TypeNotFound, "the detail", false},
		{db.ErrConflict, http.StatusConflict, TypeConflict, "the detail", false},
		{fault.New(fault.CodeInvalid, "x"), http.StatusUnprocessableEntity, TypeValidation, "the detail", false},
		{fault.New(fault.CodeForbidden, "x"), http.StatusForbidden, TypeForbidden, "the detail", false},
		{waitingroom.ErrUnavailable, http.StatusInternalServerError, TypeInternal, "", false}, // worded by the operations that document a 503
		{fmt.Errorf("%w: %w", waitingroom.ErrUnavailable, &net.OpError{Op: "dial", Err: errors.New("refused")}), http.StatusServiceUnavailable, TypeCellUnavailable, "", true},
		{cells.ErrUnavailable, http.StatusServiceUnavailable, TypeCellUnavailable, "", true},
		{purchase.ErrIdempotencyConflict, http.StatusConflict, TypeIdempotencyConflict, "", false},
		{purchase.ErrSeatLimit, http.StatusConflict, TypeSeatLimit, "", false},
		{purchase.ErrSeatsNotInEvent, http.StatusUnprocessableEntity, TypeValidation, "Validation failed.", false},
		{purchase.ErrOrderNotCancelable, http.StatusConflict, TypeOrderNotCancelable, "", false},
		{purchase.ErrOrderNotRefundable, http.StatusConflict, TypeOrderNotRefundable, "", false},
		{webhooks.ErrEndpointLimit, http.StatusConflict, TypeEndpointLimit, "", false},
		{webhooks.ErrDuplicateURL, http.StatusConflict, TypeEndpointURLInUse, "", false},
		{page.ErrBadCursor, http.StatusUnprocessableEntity, TypeValidation, "Validation failed.", false},
		{&purchase.SeatUnavailableError{SeatIDs: []uuid.UUID{seat}}, http.StatusConflict, TypeSeatUnavailable, "", false},
		{&catalog.ValidationError{Location: "body.name", Message: "expected a name"}, http.StatusUnprocessableEntity, TypeValidation, "Validation failed.", false},
		{errors.New("secret internal text"), http.StatusInternalServerError, TypeInternal, "", false},
		{fault.Permanent(errors.New("secret internal text")), http.StatusInternalServerError, TypeInternal, "", false},
	} {
		for _, err := range []error{tc.err, fmt.Errorf("wrapped: %w", tc.err)} {
			got := h.problemFor(ctx, err, "op", "the detail")
			var p *Problem
			require.ErrorAs(t, got, &p, "%v", err)
			require.Equal(t, tc.status, p.Status, "%v", err)
			require.Equal(t, tc.typ, p.Type, "%v", err)
			require.Equal(t, http.StatusText(tc.status), p.Title, "%v", err)
			if tc.detail != "" {
				require.Equal(t, tc.detail, p.Detail, "%v", err)
			}
			require.NotContains(t, p.Detail, "secret")
			var hs huma.HeadersError
			require.Equal(t, tc.retryAfter, errors.As(got, &hs) && hs.GetHeaders().Get("Retry-After") != "", "%v: Retry-After", err)
		}
	}
	require.NoError(t, h.problemFor(ctx, nil, "op", "the detail"))
	var p *Problem
	require.ErrorAs(t, h.problemFor(ctx, &purchase.SeatUnavailableError{SeatIDs: []uuid.UUID{seat}}, "op", ""), &p)
	require.Equal(t, []uuid.UUID{seat}, p.SeatIDs, "a seat-unavailable problem names the seats")
	require.ErrorAs(t, h.problemFor(ctx, &webhooks.ValidationError{Location: "body.url", Message: "expected https"}, "op", ""), &p)
	require.Equal(t, []*huma.ErrorDetail{{Location: "body.url", Message: "expected https"}}, p.Errors)
}
