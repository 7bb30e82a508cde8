package handlers

import (
	"context"

	"github.com/google/uuid"

	"boxoffice/domain/catalog"
)

// SeatScoreBody is the score of one seat or of every seat of one row.
type SeatScoreBody struct {
	SeatID  *uuid.UUID `json:"seatId,omitempty" doc:"One seat of this event; or give section and row instead."`
	Section string     `json:"section,omitempty" maxLength:"200" example:"Floor" doc:"With row: the row's section."`
	Row     string     `json:"row,omitempty" maxLength:"200" example:"B" doc:"With section: every seat of this row (the part of a label before its last dash: B for B-12)."`
	Score   int        `json:"score" minimum:"-1000000" maximum:"1000000" example:"100" doc:"Higher is better; every seat starts at 0."`
}

// SetSeatScoresInput sets seat scores of an event.
type SetSeatScoresInput struct {
	EventPathInput
	Body struct {
		Scores []SeatScoreBody `json:"scores" minItems:"1" maxItems:"1000" doc:"1 to 1,000 scores, each of one seat or one row. Rows are applied first, then seats: a seat named on its own keeps its score whatever its row's."`
	}
}

func (h *Handlers) setSeatScores(ctx context.Context, in *SetSeatScoresInput) (*struct{}, error) {
	c, eventID, err := h.eventPath(ctx, in.EventID)
	if err != nil {
		return nil, err
	}
	scores := make([]catalog.SeatScore, len(in.Body.Scores))
	for i, s := range in.Body.Scores {
		scores[i] = catalog.SeatScore{Section: s.Section, Row: s.Row, Score: s.Score}
		if s.SeatID != nil {
			scores[i].SeatID = *s.SeatID
		}
	}
	if err := c.Catalog.SetSeatScores(ctx, identity(ctx).OrganizerID, eventID, scores); err != nil {
		return nil, h.problemFor(ctx, err, "set seat scores", "No such event.", "event_id", eventID)
	}
	h.logger.InfoContext(ctx, "seat scores set", "correlation_id", CorrelationID(ctx), "event_id", eventID, "scores", len(scores))
	return nil, nil
}
