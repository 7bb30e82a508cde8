package handlers

import (
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"boxoffice/domain/tickets"
)

// Examples of ids, the same across the document so that a reader can
// follow one event from its creation to the door.
var (
	exampleEventID = "01936a4e-7c1e-7d5a-9a63-2f4d8c0b1e27"
	exampleSeatA   = "01936a4e-7c1f-7b10-8e42-6a1c5d3e9f01"
	exampleSeatB   = "01936a4e-7c1f-7b10-8e42-6a1c5d3e9f02"
	exampleTicket  = "01936a52-1d0a-7c44-b1e5-93f0a7d2c6b8"
	exampleBuyer   = "5f0c2a9e-3b7d-4e61-9a18-c2d4f6e8a0b3"
	exampleOrder   = "01936a4f-0a2b-7e3c-9d14-5b6a7c8d9e0f"
)

// requestExamples are the example request bodies the reference shows,
// by operation id. TestRequestExamplesAreValid validates each against its
// operation's schema and requires one for every JSON request body but
// Stripe's (whose body is Stripe's event, documented by Stripe).
var requestExamples = map[string]any{
	"create-event": map[string]any{
		"name": "Aurora — Live at the Arena", "startsAt": "2027-06-01T19:30:00Z", "currency": "eur",
		"categories": []any{
			map[string]any{"name": "Floor", "priceMinor": 8900, "seatLimit": 4},
			map[string]any{"name": "Balcony", "priceMinor": 5900},
		},
		"sections": []any{
			map[string]any{"name": "Floor", "rows": 20, "seatsPerRow": 30, "priceMinor": 8900, "category": "Floor"},
			map[string]any{"name": "Balcony", "rows": 8, "seatsPerRow": 25, "priceMinor": 5900, "category": "Balcony"},
		},
	},
	"create-hold":                map[string]any{"seatIds": []string{exampleSeatA, exampleSeatB}},
	"create-best-available-hold": map[string]any{"categoryId": "01936a4e-7c1e-7d5a-9a63-2f4d8c0b1e30", "quantity": 2},
	"check-in":                   map[string]any{"qrPayload": exampleQRPayload(), "gate": "north-1"},
	"check-in-batch": map[string]any{"scans": []any{
		map[string]any{"qrPayload": exampleQRPayload(), "gate": "north-1", "scannedAt": "2027-06-01T18:52:07Z"},
	}},
	"update-onsale":            map[string]any{"opensAt": "2027-03-01T10:00:00Z", "maxRate": 50, "seatLimit": 4, "holdTtlSeconds": 600},
	"revoke-admission":         map[string]any{"userId": exampleBuyer},
	"refund-order":             map[string]any{"ticketIds": []string{exampleTicket}, "resell": true},
	"create-api-key":           map[string]any{"name": "box office sync"},
	"recover-webhook-endpoint": map[string]any{"since": "2027-06-01T18:00:00Z"},
	"replay-webhook-message":   map[string]any{},
	"create-webhook-endpoint": map[string]any{
		"url": "https://hooks.example.com/boxoffice", "description": "Ticket sync",
		"eventTypes": []string{"order.paid", "ticket.issued", "order.refunded"},
	},
	"update-webhook-endpoint": map[string]any{"enabled": false},
	"block-seats":             map[string]any{"seatIds": []string{exampleSeatA, exampleSeatB}, "reason": "press", "note": "Review, two seats"},
	"release-seats":           map[string]any{"seatIds": []string{exampleSeatB}},
	"set-seat-scores": map[string]any{"scores": []any{
		map[string]any{"section": "Floor", "row": "A", "score": 100},
		map[string]any{"seatId": exampleSeatA, "score": 120},
	}},
	"set-onsale-phases": map[string]any{"phases": []any{
		map[string]any{"name": "presale", "opensAt": "2027-03-01T10:00:00Z", "presale": true, "categoryIds": []string{"01936a4e-7c1e-7d5a-9a63-2f4d8c0b1e30"}},
		map[string]any{"name": "general", "opensAt": "2027-03-03T10:00:00Z", "presale": false},
	}},
	"join-waitlist":        map[string]any{"categoryId": "01936a4e-7c1e-7d5a-9a63-2f4d8c0b1e30", "quantity": 2},
	"create-presale-codes": map[string]any{"phase": "presale", "count": 500, "maxUses": 1, "maxSeats": 4},
	"issue-order": map[string]any{
		"seatIds": []string{exampleSeatA}, "channel": "box_office", "buyerId": exampleBuyer,
		"amountMinor": 8900, "reference": "till 3 receipt 0042",
	},
}

// exampleQRPayload is a ticket's QR payload as the API issues it, signed
// with an example key (the all-zero seed), for the check-in examples.
func exampleQRPayload() string {
	s, err := tickets.NewSigner(make([]byte, tickets.SeedSize))
	if err != nil {
		panic(err) // the seed has the right size
	}
	return s.Sign(tickets.Ticket{
		ID: uuid.MustParse(exampleTicket), OrderID: uuid.MustParse(exampleOrder),
		SeatID: uuid.MustParse(exampleSeatA), EventID: uuid.MustParse(exampleEventID),
		IssuedAt: time.Date(2027, 3, 1, 10, 4, 31, 0, time.UTC),
	})
}

// addRequestExamples puts requestExamples on their operations' JSON
// request bodies.
func addRequestExamples(doc *huma.OpenAPI) {
	for _, item := range doc.Paths {
		for _, op := range operations(item) {
			ex, ok := requestExamples[op.OperationID]
			if !ok || op.RequestBody == nil {
				continue
			}
			if mt := op.RequestBody.Content["application/json"]; mt != nil {
				mt.Example = ex
			}
		}
	}
}
