package handlers

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/domain/cells"
	"boxoffice/domain/purchase"
)

// The organizer's own claims on an event's seats (issue 30 item 2): seats
// held back, and orders issued without a buyer (comps, box office sales).
// Only the event's organizer may; for anyone else the event does not
// exist (404).

// SeatIDsBody names seats of an event.
type SeatIDsBody struct {
	SeatIDs []uuid.UUID `json:"seatIds" minItems:"1" maxItems:"1000" unique:"true" doc:"1 to 1,000 distinct seats of this event."`
}

// BlockSeatsInput blocks seats of an event.
type BlockSeatsInput struct {
	EventPathInput
	Body struct {
		SeatIDs []uuid.UUID `json:"seatIds" minItems:"1" maxItems:"1000" unique:"true" doc:"1 to 1,000 distinct seats of this event."`
		Reason  string      `json:"reason" enum:"kill,production,press,sponsor,house,other" example:"press" doc:"Why the seats are held back."`
		Note    string      `json:"note,omitempty" maxLength:"500" example:"Rolling Stone, 2 seats" doc:"Free text for the organizer's team."`
	}
}

// ReleaseSeatsInput releases blocked seats of an event.
type ReleaseSeatsInput struct {
	EventPathInput
	Body SeatIDsBody
}

// SeatBlockBody is one seat the organizer holds back.
type SeatBlockBody struct {
	SeatID    uuid.UUID `json:"seatId"`
	Section   string    `json:"section"`
	Label     string    `json:"label"`
	Reason    string    `json:"reason" enum:"kill,production,press,sponsor,house,other"`
	Note      string    `json:"note,omitempty"`
	BlockedAt time.Time `json:"blockedAt"`
}

// SeatBlocksOutput lists an event's blocked seats.
type SeatBlocksOutput struct {
	Body struct {
		Blocks []SeatBlockBody `json:"blocks" doc:"Every blocked seat of the event, in seat map order."`
	}
}

// ReleaseSeatsOutput names the seats released.
type ReleaseSeatsOutput struct {
	Body struct {
		Released []uuid.UUID `json:"released" doc:"The seats that were blocked and are on sale again; seats that were not blocked are left out."`
	}
}

// IssueOrderInput issues tickets for seats of an event without a buyer's hold.
type IssueOrderInput struct {
	EventPathInput
	IdempotencyKeyHeader
	Body struct {
		SeatIDs     []uuid.UUID `json:"seatIds" minItems:"1" maxItems:"100" unique:"true" doc:"1 to 100 distinct seats of this event, available or blocked (their block ends)."`
		Channel     string      `json:"channel" enum:"comp,box_office" example:"comp" doc:"comp: free tickets; box_office: paid outside the payment provider, recorded with reference."`
		BuyerID     string      `json:"buyerId,omitempty" format:"uuid" doc:"The user the order and its tickets belong to (their user id); the calling organizer user when absent."`
		AmountMinor int64       `json:"amountMinor,omitempty" minimum:"0" maximum:"100000000" doc:"What a box office sale was paid, in minor units of the event currency; ignored for comp."`
		Reference   string      `json:"reference,omitempty" maxLength:"200" example:"till 3 receipt 0042" doc:"Required for box_office: where the payment is recorded. Optional for comp."`
	}
}

// IssuedOrderBody is an order the organizer issued.
type IssuedOrderBody struct {
	OrderID     uuid.UUID `json:"orderId"`
	BuyerID     uuid.UUID `json:"buyerId"`
	Status      string    `json:"status" enum:"paid" doc:"Paid from the start; ticketed once the tickets are issued, as a buyer's order."`
	Channel     string    `json:"channel" enum:"comp,box_office"`
	AmountMinor int64     `json:"amountMinor"`
	Currency    string    `json:"currency"`
}

// IssueOrderOutput is the issued order.
type IssueOrderOutput struct {
	Body IssuedOrderBody
}

func seatBlocksBody(blocks []purchase.SeatBlock) *SeatBlocksOutput {
	out := &SeatBlocksOutput{}
	out.Body.Blocks = make([]SeatBlockBody, len(blocks))
	for i, b := range blocks {
		out.Body.Blocks[i] = SeatBlockBody{
			SeatID: b.SeatID, Section: b.Section, Label: b.Label, Reason: string(b.Reason), Note: b.Note, BlockedAt: b.BlockedAt.UTC(),
		}
	}
	return out
}

func (h *Handlers) blockSeats(ctx context.Context, in *BlockSeatsInput) (*SeatBlocksOutput, error) {
	c, eventID, err := h.eventPath(ctx, in.EventID)
	if err != nil {
		return nil, err
	}
	id := identity(ctx)
	err = c.Purchase.BlockSeats(ctx, purchase.BlockSeatsParams{
		OrganizerID: id.OrganizerID, UserID: id.UserID, EventID: eventID,
		SeatIDs: in.Body.SeatIDs, Reason: purchase.BlockReason(in.Body.Reason), Note: in.Body.Note,
	})
	if err != nil {
		return nil, h.problemFor(ctx, err, "block seats", "No such event.", "event_id", eventID)
	}
	h.logger.InfoContext(ctx, "seats blocked", "correlation_id", CorrelationID(ctx), "event_id", eventID,
		"seats", len(in.Body.SeatIDs), "reason", in.Body.Reason)
	blocks, err := c.Purchase.SeatBlocks(ctx, id.OrganizerID, eventID)
	if err != nil {
		return nil, h.problemFor(ctx, err, "list seat blocks", "No such event.", "event_id", eventID)
	}
	return seatBlocksBody(blocks), nil
}

func (h *Handlers) listSeatBlocks(ctx context.Context, in *EventPathInput) (*SeatBlocksOutput, error) {
	blocks, _, err := onEvent(ctx, h, in.EventID, "list seat blocks", func(c *cells.Cell, eventID uuid.UUID) ([]purchase.SeatBlock, error) {
		return c.Purchase.SeatBlocks(ctx, identity(ctx).OrganizerID, eventID)
	})
	if err != nil {
		return nil, err
	}
	return seatBlocksBody(blocks), nil
}

func (h *Handlers) releaseSeats(ctx context.Context, in *ReleaseSeatsInput) (*ReleaseSeatsOutput, error) {
	released, eventID, err := onEvent(ctx, h, in.EventID, "release seats", func(c *cells.Cell, eventID uuid.UUID) ([]uuid.UUID, error) {
		return c.Purchase.ReleaseSeats(ctx, identity(ctx).OrganizerID, eventID, in.Body.SeatIDs)
	})
	if err != nil {
		return nil, err
	}
	h.logger.InfoContext(ctx, "seats released", "correlation_id", CorrelationID(ctx), "event_id", eventID, "seats", len(released))
	out := &ReleaseSeatsOutput{}
	out.Body.Released = released
	return out, nil
}

func (h *Handlers) issueOrder(ctx context.Context, in *IssueOrderInput) (*IssueOrderOutput, error) {
	c, eventID, err := h.eventPath(ctx, in.EventID)
	if err != nil {
		return nil, err
	}
	id := identity(ctx)
	recipient := id.UserID
	if in.Body.BuyerID != "" {
		if recipient, err = parseUUID(in.Body.BuyerID, "body.buyerId"); err != nil {
			return nil, err
		}
	}
	if in.Body.Channel == string(purchase.ChannelBoxOffice) && in.Body.Reference == "" {
		return nil, invalid("body.reference", "a box office sale needs the reference of its payment")
	}
	p := purchase.IssueOrderParams{
		OrganizerID: id.OrganizerID, EventID: eventID, RecipientID: recipient, SeatIDs: in.Body.SeatIDs,
		Channel: purchase.Channel(in.Body.Channel), AmountMinor: in.Body.AmountMinor, Reference: in.Body.Reference,
		CorrelationID: CorrelationID(ctx),
	}
	bodyOf := func(o purchase.IssuedOrder) IssuedOrderBody {
		return IssuedOrderBody{
			OrderID: o.OrderID, BuyerID: recipient, Status: string(purchase.OrderPaid), Channel: in.Body.Channel,
			AmountMinor: o.AmountMinor, Currency: o.Currency,
		}
	}
	body, replayed, err := idempotently(ctx, c, idempotentRequest{op: "issue-order", key: in.IdempotencyKey, parts: []any{eventID, in.Body}},
		func(ctx context.Context, tx pgx.Tx) (IssuedOrderBody, error) {
			o, err := c.Purchase.IssueOrderTx(ctx, tx, p)
			return bodyOf(o), err
		},
		func(ctx context.Context) (IssuedOrderBody, error) {
			o, err := c.Purchase.IssueOrder(ctx, p)
			return bodyOf(o), err
		})
	if err != nil {
		return nil, h.problemFor(ctx, err, "issue order", "No such event.", "event_id", eventID)
	}
	if replayed {
		h.logger.InfoContext(ctx, "order issue replayed", "correlation_id", CorrelationID(ctx), "order_id", body.OrderID)
	} else {
		h.logger.InfoContext(ctx, "order issued", "correlation_id", CorrelationID(ctx), "event_id", eventID,
			"order_id", body.OrderID, "channel", in.Body.Channel, "seats", len(in.Body.SeatIDs))
	}
	return &IssueOrderOutput{Body: body}, nil
}
