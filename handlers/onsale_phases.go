package handlers

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/domain/waitingroom"
)

// OnsalePhase is one phase of an onsale.
type OnsalePhase struct {
	Name        string      `json:"name" minLength:"1" maxLength:"100" doc:"Unique within the event, e.g. presale or general."`
	OpensAt     time.Time   `json:"opensAt" doc:"When the phase comes into force; it lasts until the next phase opens. Before the first phase opens, the first one's rules apply (to the pre-queue too)."`
	Presale     bool        `json:"presale" doc:"A presale admits to the waiting room and to holds only buyers who redeemed one of its codes."`
	CategoryIDs []uuid.UUID `json:"categoryIds,omitempty" maxItems:"100" doc:"The price categories the phase sells; absent or empty: all of them."`
}

// OnsalePhaseSpec is one phase of an onsale as the organizer sets it
// (OnsalePhase's fields: a type of its own so that the request schema
// stays closed and the response's open).
type OnsalePhaseSpec struct {
	Name        string      `json:"name" minLength:"1" maxLength:"100" doc:"Unique within the event, e.g. presale or general."`
	OpensAt     time.Time   `json:"opensAt" doc:"When the phase comes into force; it lasts until the next phase opens. Before the first phase opens, the first one's rules apply (to the pre-queue too)."`
	Presale     bool        `json:"presale" doc:"A presale admits to the waiting room and to holds only buyers who redeemed one of its codes."`
	CategoryIDs []uuid.UUID `json:"categoryIds,omitempty" maxItems:"100" doc:"The price categories the phase sells; absent or empty: all of them."`
}

// OnsalePhasesBody is an onsale's phases.
type OnsalePhasesBody struct {
	Phases []OnsalePhase `json:"phases" doc:"In opening order."`
	// Current names the phase in force now; absent without phases.
	Current string `json:"current,omitempty" doc:"The phase in force now: the latest opened, or the first before any has opened."`
}

// OnsalePhasesOutput is an onsale's phases.
type OnsalePhasesOutput struct {
	Body OnsalePhasesBody
}

// SetOnsalePhasesInput replaces an onsale's phases.
type SetOnsalePhasesInput struct {
	EventPathInput
	Body struct {
		Phases []OnsalePhaseSpec `json:"phases" maxItems:"20" doc:"The onsale's phases; empty: none (the onsale sells every category to every admitted buyer). A phase keeps its codes when named again; leaving out a phase that has codes is a 409."`
	}
}

// CreatePresaleCodesInput creates presale codes in bulk.
type CreatePresaleCodesInput struct {
	EventPathInput
	IdempotencyKeyHeader
	Body struct {
		Phase    string   `json:"phase" minLength:"1" maxLength:"100" doc:"The presale phase the codes admit to."`
		Count    int      `json:"count,omitempty" minimum:"0" maximum:"10000" doc:"How many random codes to make (12 characters, Crockford base32), when codes is absent."`
		Codes    []string `json:"codes,omitempty" maxItems:"10000" doc:"Your own codes (4 to 64 characters; case-insensitive), instead of count."`
		MaxUses  int      `json:"maxUses" minimum:"1" maximum:"1000000" doc:"How many buyers each code admits."`
		MaxSeats int      `json:"maxSeats" minimum:"1" maximum:"1000" doc:"How many seats the buyers of one code may together hold or own in the event."`
	}
}

// PresaleCode is a created code: shown once, only its hash is kept.
type PresaleCode struct {
	ID   uuid.UUID `json:"id"`
	Code string    `json:"code" doc:"Give it to the buyer; it is not shown again."`
}

// CreatePresaleCodesOutput are the created codes.
type CreatePresaleCodesOutput struct {
	Body struct {
		Codes []PresaleCode `json:"codes"`
	}
}

func phasesOutput(phases []waitingroom.PhaseInfo, now time.Time) *OnsalePhasesOutput {
	out := &OnsalePhasesOutput{Body: OnsalePhasesBody{Phases: make([]OnsalePhase, 0, len(phases))}}
	for _, p := range phases {
		out.Body.Phases = append(out.Body.Phases, OnsalePhase{Name: p.Name, OpensAt: p.OpensAt.UTC(), Presale: p.Presale, CategoryIDs: p.CategoryIDs})
	}
	if cur, ok := waitingroom.InForce(phases, now); ok {
		out.Body.Current = cur.Name
	}
	return out
}

func (h *Handlers) getOnsalePhases(ctx context.Context, in *EventPathInput) (*OnsalePhasesOutput, error) {
	c, eventID, _, err := h.organizerOnsale(ctx, in.EventID, nil)
	if err != nil {
		return nil, err
	}
	phases, err := c.Room.Phases(ctx, eventID)
	if err != nil {
		return nil, h.problemFor(ctx, err, "onsale phases", "No such event.", "event_id", eventID)
	}
	return phasesOutput(phases, time.Now()), nil
}

func (h *Handlers) setOnsalePhases(ctx context.Context, in *SetOnsalePhasesInput) (*OnsalePhasesOutput, error) {
	names, opens := map[string]bool{}, map[time.Time]bool{}
	specs := make([]waitingroom.PhaseSpec, 0, len(in.Body.Phases))
	for _, p := range in.Body.Phases {
		t := p.OpensAt.UTC().Truncate(time.Microsecond)
		if names[p.Name] {
			return nil, invalid("body.phases", "phase names must be distinct")
		}
		if opens[t] {
			return nil, invalid("body.phases", "phases must open at distinct times")
		}
		names[p.Name], opens[t] = true, true
		specs = append(specs, waitingroom.PhaseSpec{Name: p.Name, OpensAt: t, Presale: p.Presale, CategoryIDs: p.CategoryIDs})
	}
	c, eventID, _, err := h.organizerOnsale(ctx, in.EventID, nil)
	if err != nil {
		return nil, err
	}
	phases, err := c.Room.SetPhases(ctx, eventID, specs)
	if err != nil {
		return nil, h.problemFor(ctx, err, "set onsale phases", "No such event.", "event_id", eventID)
	}
	h.logger.InfoContext(ctx, "onsale phases set", "correlation_id", CorrelationID(ctx), "event_id", eventID, "phases", len(phases))
	return phasesOutput(phases, time.Now()), nil
}

func (h *Handlers) createPresaleCodes(ctx context.Context, in *CreatePresaleCodesInput) (*CreatePresaleCodesOutput, error) {
	b := in.Body
	switch {
	case len(b.Codes) == 0 && b.Count == 0:
		return nil, invalid("body.count", "give count or codes")
	case len(b.Codes) > 0 && b.Count > 0:
		return nil, invalid("body.count", "give count or codes, not both")
	}
	for _, code := range b.Codes {
		if n := len(waitingroom.NormalizeCode(code)); n < 4 || n > 64 {
			return nil, invalid("body.codes", "a code has 4 to 64 characters")
		}
	}
	c, eventID, _, err := h.organizerOnsale(ctx, in.EventID, nil)
	if err != nil {
		return nil, err
	}
	spec := waitingroom.CodeSpec{Phase: b.Phase, Codes: b.Codes, Count: b.Count, MaxUses: b.MaxUses, MaxSeats: b.MaxSeats}
	bodyOf := func(codes []waitingroom.Code) []PresaleCode {
		out := make([]PresaleCode, 0, len(codes))
		for _, code := range codes {
			out = append(out, PresaleCode{ID: code.ID, Code: code.Code})
		}
		return out
	}
	// The codes are shown once: the answer kept for a retry is sealed, as
	// a webhook endpoint's secret is.
	codes, replayed, err := idempotently(ctx, c, idempotentRequest{op: "create-presale-codes", key: in.IdempotencyKey, parts: []any{eventID, b}, secret: true},
		func(ctx context.Context, tx pgx.Tx) ([]PresaleCode, error) {
			codes, err := c.Room.CreateCodesTx(ctx, tx, eventID, spec)
			return bodyOf(codes), err
		},
		func(ctx context.Context) ([]PresaleCode, error) {
			codes, err := c.Room.CreateCodes(ctx, eventID, spec)
			return bodyOf(codes), err
		})
	if err != nil {
		return nil, h.problemFor(ctx, err, "create presale codes", "No such event.", "event_id", eventID)
	}
	// The codes themselves are secrets: never logged.
	if replayed {
		h.logger.InfoContext(ctx, "presale codes replayed", "correlation_id", CorrelationID(ctx), "event_id", eventID, "count", len(codes))
	} else {
		h.logger.InfoContext(ctx, "presale codes created", "correlation_id", CorrelationID(ctx), "event_id", eventID, "count", len(codes))
	}
	out := &CreatePresaleCodesOutput{}
	out.Body.Codes = codes
	return out, nil
}
