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

// pathCell is how an operation on one event or order starts: it parses
// the id of the path parameter at location, then finds the cell that
// holds it with find. It returns the 422 of a malformed id before any
// cell is asked, else find's 404 or 503 problem.
func pathCell(ctx context.Context, raw, location string,
	find func(context.Context, uuid.UUID) (*cells.Cell, error),
) (*cells.Cell, uuid.UUID, error) {
	id, err := parseUUID(raw, location)
	if err != nil {
		return nil, id, err
	}
	c, err := find(ctx, id)
	return c, id, err
}

// eventPath parses an eventId path parameter and returns the event's
// cell, or the 422, 404 or 503 problem (pathCell).
func (h *Handlers) eventPath(ctx context.Context, raw string) (*cells.Cell, uuid.UUID, error) {
	return pathCell(ctx, raw, "path.eventId", h.eventCell)
}

// onEvent is an operation on one event: it finds the event's cell
// (eventPath's 422, 404 or 503), has do act on the event there, and maps
// do's error with problemFor, op naming the operation: an event the
// caller may not see is "No such event.". It returns do's result and the
// event's id, for what the operation logs.
func onEvent[T any](ctx context.Context, h *Handlers, raw, op string, do func(c *cells.Cell, eventID uuid.UUID) (T, error)) (T, uuid.UUID, error) {
	var zero T
	c, eventID, err := h.eventPath(ctx, raw)
	if err != nil {
		return zero, eventID, err
	}
	v, err := do(c, eventID)
	if err != nil {
		return zero, eventID, h.problemFor(ctx, err, op, "No such event.", "event_id", eventID)
	}
	return v, eventID, nil
}

// orderPath parses an orderId path parameter and returns the order's
// cell, or the 422, 404 or 503 problem (pathCell).
func (h *Handlers) orderPath(ctx context.Context, raw string) (*cells.Cell, uuid.UUID, error) {
	return pathCell(ctx, raw, "path.orderId", h.orderCell)
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
