package handlers

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/catalog"
	"boxoffice/platform/payload"
)

// seatMapByPayload is how the seat map was encoded before encodeSeatMap:
// its SeatsOutputBody through payload.Encode, the encoder of every other
// body. It is the oracle encodeSeatMap must match byte for byte.
func seatMapByPayload(t *testing.T, m catalog.SeatMap) []byte {
	t.Helper()
	body := SeatsOutputBody{Seats: make([]SeatBody, len(m.Seats)), Categories: make([]CategoryBody, len(m.Categories))}
	for i, s := range m.Seats {
		body.Seats[i] = SeatBody{
			ID: s.ID, Label: s.Label, Section: s.Section, PriceMinor: s.PriceMinor,
			CategoryID: s.CategoryID, Category: s.Category, Status: s.Status,
		}
	}
	for i, c := range m.Categories {
		body.Categories[i] = CategoryBody(c)
	}
	var buf bytes.Buffer
	require.NoError(t, payload.Encode(&buf, body))
	return buf.Bytes()
}

// The hand-written seat map encoder writes what payload.Encode writes, for
// strings of every kind JSON treats specially (quotes, backslashes,
// control characters, HTML characters, invalid UTF-8, U+2028/U+2029,
// non-ASCII), zero UUIDs, extreme prices, and empty or nil lists, and its
// representation (ETag, gzip) follows from those bytes.
func TestSeatMapEncodingIsPayloads(t *testing.T) {
	hard := []string{
		"", "A-1", `say "hi"`, `back\slash`, "tab\there", "nl\nx", "\x00nul", "\x1f", "\x7f",
		"<b>&amp;</b>", "café", "Rang 1 – Mitte", "\u2028line\u2029", "bad\xffutf8", "\xc3", "🎟️ seat",
		"ÿ", "\u00a0nbsp", "/slash/",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() string {
		if rng.IntN(3) == 0 {
			return hard[rng.IntN(len(hard))] + hard[rng.IntN(len(hard))]
		}
		return hard[rng.IntN(len(hard))]
	}
	prices := []int64{0, 1, -1, 8500, math.MaxInt64, math.MinInt64}
	maps := []catalog.SeatMap{
		{},                                // nil seats and categories
		{Seats: []catalog.SeatStatus{}},   // empty
		{Seats: []catalog.SeatStatus{{}}}, // one zero seat
	}
	for n := range 20 {
		m := catalog.SeatMap{}
		for i := range n * 7 {
			s := catalog.SeatStatus{
				ID: uuid.New(), Label: pick(), Section: pick(), PriceMinor: prices[rng.IntN(len(prices))],
				Category: pick(), Status: []string{"available", "held", "sold"}[i%3],
			}
			if rng.IntN(4) > 0 {
				s.CategoryID = uuid.New()
			}
			m.Seats = append(m.Seats, s)
		}
		for range n % 4 {
			m.Categories = append(m.Categories, catalog.PriceCategory{ID: uuid.New(), Name: pick(), PriceMinor: 4500, SeatLimit: n})
		}
		maps = append(maps, m)
	}
	for i, m := range maps {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			want := seatMapByPayload(t, m)
			got, err := encodeSeatMap(m)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got.json))
			byPayload, err := representationOf(want)
			require.NoError(t, err)
			require.Equal(t, byPayload.tag, got.tag, "the ETag follows from the bytes")
			require.Equal(t, byPayload.gzip, got.gzip)
		})
	}
}

// BenchmarkEncodeSeatMap encodes (JSON, ETag, gzip) the seat map of a
// 100,000-seat event, as the seat-map cache does once per version.
func BenchmarkEncodeSeatMap(b *testing.B) {
	m := catalog.SeatMap{Categories: []catalog.PriceCategory{{ID: uuid.New(), Name: "Stalls", PriceMinor: 8500}}}
	for i := range 100_000 {
		m.Seats = append(m.Seats, catalog.SeatStatus{
			ID: uuid.New(), Label: fmt.Sprintf("%d-%d", i/500+1, i%500+1), Section: "Stalls", PriceMinor: 8500,
			CategoryID: m.Categories[0].ID, Category: "Stalls", Status: "available",
		})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encodeSeatMap(m); err != nil {
			b.Fatal(err)
		}
	}
}
