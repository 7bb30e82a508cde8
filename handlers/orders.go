package handlers

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"boxoffice/auth"
	"boxoffice/purchase"
)

// OrderPathInput names an order.
type OrderPathInput struct {
	OrderID string `path:"orderId" doc:"Order id (UUID)."`
}

// OrderHoldBody is the hold of an order.
type OrderHoldBody struct {
	ID        uuid.UUID   `json:"id"`
	Status    string      `json:"status" enum:"active,confirmed,expired,released"`
	ExpiresAt time.Time   `json:"expiresAt"`
	SeatIDs   []uuid.UUID `json:"seatIds"`
}

// OrderPaymentBody is the payment of an order.
type OrderPaymentBody struct {
	Status          string `json:"status"`
	PaymentIntentID string `json:"paymentIntentId,omitempty"`
	ClientSecret    string `json:"clientSecret,omitempty" doc:"For confirming the payment; present only while payment is pending."`
}

// OrderTicketBody is one ticket of an order.
type OrderTicketBody struct {
	ID       uuid.UUID `json:"id"`
	SeatID   uuid.UUID `json:"seatId"`
	IssuedAt time.Time `json:"issuedAt"`
}

// OrderBody is an order as its owner sees it.
type OrderBody struct {
	ID          uuid.UUID         `json:"id"`
	EventID     uuid.UUID         `json:"eventId"`
	Status      string            `json:"status" enum:"pending_payment,authorized,capture_pending,paid,ticketed,failed,canceled,refunding,refunded"`
	AmountMinor int64             `json:"amountMinor"`
	Currency    string            `json:"currency"`
	CreatedAt   time.Time         `json:"createdAt"`
	Hold        OrderHoldBody     `json:"hold"`
	Payment     *OrderPaymentBody `json:"payment"`
	Tickets     []OrderTicketBody `json:"tickets"`
}

// OrderOutput is an order response.
type OrderOutput struct {
	Body OrderBody
}

func (h *Handlers) registerOrders(api huma.API) {
	huma.Register(api, secured(huma.Operation{
		OperationID: "get-order", Method: http.MethodGet, Path: "/v1/orders/{orderId}",
		Summary: "Get one of your orders", Tags: []string{"Orders"},
		Description: "Only the order's owner sees it; for anyone else it does not exist (404).",
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.RoleBuyer, auth.RoleOrganizer), h.getOrder)
}

func (h *Handlers) getOrder(ctx context.Context, in *OrderPathInput) (*OrderOutput, error) {
	orderID, err := parseUUID(in.OrderID, "path.orderId")
	if err != nil {
		return nil, err
	}
	o, err := h.cfg.Purchase.Order(ctx, identity(ctx).UserID, orderID)
	switch {
	case errors.Is(err, purchase.ErrOrderNotFound):
		return nil, problem(http.StatusNotFound, TypeNotFound, "No such order.")
	case err != nil:
		return nil, h.internal(ctx, "get order", err, "order_id", orderID)
	}
	body := OrderBody{
		ID: o.ID, EventID: o.EventID, Status: o.Status, AmountMinor: o.AmountMinor, Currency: o.Currency,
		CreatedAt: o.CreatedAt.UTC(),
		Hold:      OrderHoldBody{ID: o.HoldID, Status: o.HoldStatus, ExpiresAt: o.HoldExpiresAt.UTC(), SeatIDs: o.SeatIDs},
		Tickets:   make([]OrderTicketBody, 0, len(o.Tickets)),
	}
	if p := o.Payment; p != nil {
		body.Payment = &OrderPaymentBody{Status: p.Status}
		if p.PaymentIntentID != nil {
			body.Payment.PaymentIntentID = *p.PaymentIntentID
		}
		if o.Status == "pending_payment" && p.ClientSecret != nil {
			body.Payment.ClientSecret = *p.ClientSecret
		}
	}
	for _, t := range o.Tickets {
		body.Tickets = append(body.Tickets, OrderTicketBody{ID: t.ID, SeatID: t.SeatID, IssuedAt: t.IssuedAt.UTC()})
	}
	return &OrderOutput{Body: body}, nil
}
