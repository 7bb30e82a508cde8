package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"boxoffice/domain/cells"
)

// The handlers reach every event, order, intent and organizer through the
// cell that holds it (package cells); these map the Router's answers to
// problems.

// eventCell returns the cell of the event, or a 404 or 503 problem.
func (h *Handlers) eventCell(ctx context.Context, eventID uuid.UUID) (*cells.Cell, error) {
	c, err := h.cells.ForEvent(ctx, eventID)
	return c, h.cellProblem(ctx, err, "No such event.", "event_id", eventID)
}

// eventPath parses an eventId path parameter and returns the event's
// cell, or the 422, 404 or 503 problem.
func (h *Handlers) eventPath(ctx context.Context, raw string) (*cells.Cell, uuid.UUID, error) {
	eventID, err := parseUUID(raw, "path.eventId")
	if err != nil {
		return nil, eventID, err
	}
	c, err := h.eventCell(ctx, eventID)
	return c, eventID, err
}

// orderCell returns the cell of the order, or a 404 or 503 problem.
func (h *Handlers) orderCell(ctx context.Context, orderID uuid.UUID) (*cells.Cell, error) {
	c, err := h.cells.ForOrder(ctx, orderID)
	return c, h.cellProblem(ctx, err, "No such order.", "order_id", orderID)
}

// organizerCell returns the cell of the calling organizer, or a 503
// problem when its cell may be down.
func (h *Handlers) organizerCell(ctx context.Context) (*cells.Cell, error) {
	id := identity(ctx).OrganizerID
	c, err := h.cells.ForOrganizer(ctx, id)
	return c, h.cellProblem(ctx, err, "", "organizer_id", id)
}

// cellProblem is the problem of the Router's err (problemFor): a 404 with
// detail notFound for cells.ErrNotFound, the 503 cell-unavailable problem
// for cells.ErrUnavailable.
func (h *Handlers) cellProblem(ctx context.Context, err error, notFound string, attrs ...any) error {
	return h.problemFor(ctx, err, "find purchase cell", notFound, attrs...)
}

// cellUnavailable is the 503 of a request whose purchase cell does not
// answer.
func cellUnavailable() error {
	return huma.ErrorWithHeaders(problem(http.StatusServiceUnavailable, TypeCellUnavailable,
		"The purchase cell that serves this is not answering; other events are not affected. Try again shortly."),
		retryAfter(5*time.Second))
}
