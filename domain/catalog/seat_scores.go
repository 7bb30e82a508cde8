package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/platform/db"
	"boxoffice/sqlcgen"
)

// MaxSeatScores is the most scores one SetSeatScores call may set.
const MaxSeatScores = 1000

// SeatScore is how good the organizer says a seat is, for best-available
// holds (purchase.BestAvailable): higher is better, every seat starts at 0
// (so an event whose organizer set nothing is picked in seat map order,
// which also breaks ties). Exactly one of SeatID and Row names the seats
// it applies to: one seat, or every seat of Row in Section (the row of a
// label "<row>-<n>": "B" for "B-12").
type SeatScore struct {
	SeatID  uuid.UUID
	Section string
	Row     string
	Score   int
}

// SetSeatScores sets seat scores of the event organizerID organizes, all
// or none, in one transaction: the rows' first, then the seats', so a
// seat named on its own keeps its score whatever its row's. Each item
// must name at least one seat of the event and no item may repeat
// another's seat or row (*ValidationError naming the item). Returns
// ErrNotFound for an event that does not exist or is another
// organizer's. A best-available hold reads the scores in its
// transaction: one that began before the commit picks by the old ones.
func (c *Catalog) SetSeatScores(ctx context.Context, organizerID, eventID uuid.UUID, scores []SeatScore) error {
	if len(scores) == 0 || len(scores) > MaxSeatScores {
		return &ValidationError{Location: "body.scores", Message: fmt.Sprintf("1 to %d scores", MaxSeatScores)}
	}
	var byID sqlcgen.SeatScoreSetByIDParams
	var byRow sqlcgen.SeatScoreSetByRowParams
	var idItem, rowItem []int // item index of each array entry
	seen := make(map[string]bool, len(scores))
	for i, s := range scores {
		loc := fmt.Sprintf("body.scores[%d]", i)
		key := "seat:" + s.SeatID.String()
		switch {
		case (s.SeatID == uuid.Nil) == (s.Row == ""):
			return &ValidationError{Location: loc, Message: "name either a seat (seatId) or a row (section and row)"}
		case s.SeatID != uuid.Nil && s.Section != "":
			return &ValidationError{Location: loc, Message: "a seat's item takes no section"}
		case s.Row != "" && s.Section == "":
			return &ValidationError{Location: loc + ".section", Message: "a row's item needs its section"}
		case s.Score < -1_000_000 || s.Score > 1_000_000:
			return &ValidationError{Location: loc + ".score", Message: "between -1000000 and 1000000"}
		case s.Row != "":
			key = "row:" + s.Section + "\x00" + s.Row
		}
		if seen[key] {
			return &ValidationError{Location: loc, Message: "names the same seat or row as an earlier item"}
		}
		seen[key] = true
		if s.Row != "" {
			byRow.Sections = append(byRow.Sections, s.Section)
			byRow.SeatRows = append(byRow.SeatRows, s.Row)
			byRow.Scores = append(byRow.Scores, int32(s.Score))
			rowItem = append(rowItem, i)
		} else {
			byID.SeatIds = append(byID.SeatIds, s.SeatID)
			byID.Scores = append(byID.Scores, int32(s.Score))
			idItem = append(idItem, i)
		}
	}
	byID.EventID, byRow.EventID = eventID, eventID
	return db.WithTx(ctx, c.pool, func(ctx context.Context, tx pgx.Tx) error {
		ev, err := sqlcgen.New().EventGetByID(ctx, db.Interpreting(tx), eventID)
		switch {
		case errors.Is(err, db.ErrNotFound) || (err == nil && ev.OrganizerID != organizerID):
			return ErrNotFound
		case err != nil:
			return fmt.Errorf("read event: %w", err)
		}
		matched := make(map[int]bool, len(scores))
		if len(rowItem) > 0 {
			items, err := sqlcgen.New().SeatScoreSetByRow(ctx, tx, byRow)
			if err != nil {
				return fmt.Errorf("set row scores: %w", err)
			}
			for _, n := range items {
				matched[rowItem[n-1]] = true
			}
		}
		if len(idItem) > 0 {
			items, err := sqlcgen.New().SeatScoreSetByID(ctx, tx, byID)
			if err != nil {
				return fmt.Errorf("set seat scores: %w", err)
			}
			for _, n := range items {
				matched[idItem[n-1]] = true
			}
		}
		for i := range scores {
			if !matched[i] {
				return &ValidationError{Location: fmt.Sprintf("body.scores[%d]", i), Message: "no seat of this event"}
			}
		}
		return nil
	})
}
