package timeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/sqlcgen"
)

// A ticket stands in its order's story where its TicketIssued event does,
// even when that event was written in the second after the one the
// ticket's issued_at (to the second) names: the issuer read its clock at
// 40.98 s and wrote at 41.01 s. Placed at issued_at, 40.000 s, it came
// before the order's creation at 40.60 s in the same second
// (cmd/boxoffice/roles TestTimelineTellsAWholePurchase failed so once).
func TestTicketIssuedAtIsItsTicketIssuedEvent(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 12, 5, 9, 6, 40, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	evs := []sqlcgen.TimelineEventsRow{
		{EventType: "HoldCreated", OccurredAt: at(600)},
		{EventType: "TicketIssueRequested", OccurredAt: at(942)},
		{EventType: "TicketIssued", OccurredAt: at(1009)},
	}
	require.Equal(t, at(1009), ticketIssuedAt(base, evs), "written in the next second")

	evs[2].OccurredAt = at(990)
	require.Equal(t, at(990), ticketIssuedAt(base, evs), "written in the same second")

	require.Equal(t, base, ticketIssuedAt(base, evs[:2]), "no TicketIssued kept: the ticket's own issued_at")

	old := []sqlcgen.TimelineEventsRow{{EventType: "TicketIssued", OccurredAt: base.Add(-time.Hour)}}
	require.Equal(t, base, ticketIssuedAt(base, old), "an earlier issuance's event is not this ticket's")
}
