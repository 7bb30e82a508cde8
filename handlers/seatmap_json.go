package handlers

import (
	"encoding/hex"
	"strconv"

	"github.com/google/uuid"

	"boxoffice/domain/catalog"
	"boxoffice/platform/payload"
)

// encodeSeatMap encodes m as the body of GET /v1/events/{eventId}/seats:
// byte for byte what payload.Encode writes for its SeatsOutputBody
// (TestSeatMapEncodingIsPayloads checks it on seat maps with every kind of
// string), without reflection. A stadium's map is 100,000 seats, encoded
// again for every version the catalogue reads (once a second per API
// process while buyers read it): through encoding/json that was two
// allocations a seat (its two UUIDs' MarshalText) and a copy of every seat
// into a SeatBody first (BenchmarkEncodeSeatMap).
func encodeSeatMap(m catalog.SeatMap) (*representation, error) {
	// A seat is about 190 bytes with its two UUIDs: sized once, the
	// buffer is not grown (and copied) a dozen times on the way.
	buf := make([]byte, 0, 64+len(m.Seats)*200)
	buf = append(buf, `{"seats":[`...)
	for i, s := range m.Seats {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"id":`...)
		buf = appendJSONUUID(buf, s.ID)
		buf = append(buf, `,"label":`...)
		buf = appendJSONString(buf, s.Label)
		buf = append(buf, `,"section":`...)
		buf = appendJSONString(buf, s.Section)
		buf = append(buf, `,"priceMinor":`...)
		buf = strconv.AppendInt(buf, s.PriceMinor, 10)
		buf = append(buf, `,"categoryId":`...)
		buf = appendJSONUUID(buf, s.CategoryID)
		buf = append(buf, `,"category":`...)
		buf = appendJSONString(buf, s.Category)
		buf = append(buf, `,"status":`...)
		buf = appendJSONString(buf, s.Status)
		buf = append(buf, '}')
	}
	// An event has a handful of categories: encoded as any body is.
	cats := make([]CategoryBody, len(m.Categories))
	for i, c := range m.Categories {
		cats[i] = CategoryBody(c)
	}
	raw, err := payload.Marshal(cats)
	if err != nil {
		return nil, err
	}
	buf = append(buf, `],"categories":`...)
	buf = append(buf, raw...)
	buf = append(buf, "}\n"...) // json.Encoder ends a value with a newline
	return representationOf(buf)
}

// appendJSONUUID appends u as encoding/json writes a uuid.UUID (its
// MarshalText, quoted), without allocating.
func appendJSONUUID(b []byte, u uuid.UUID) []byte {
	var s [38]byte
	s[0], s[37] = '"', '"'
	hex.Encode(s[1:9], u[0:4])
	s[9] = '-'
	hex.Encode(s[10:14], u[4:6])
	s[14] = '-'
	hex.Encode(s[15:19], u[6:8])
	s[19] = '-'
	hex.Encode(s[20:24], u[8:10])
	s[24] = '-'
	hex.Encode(s[25:37], u[10:16])
	return append(b, s[:]...)
}

// appendJSONString appends s as a JSON string, as payload.Encode writes
// it. Printable ASCII other than the quote and the backslash (every label
// and status in practice) is appended as it is; anything else is left to
// payload.Marshal, so its rules (control characters, invalid UTF-8,
// U+2028 and U+2029, HTML characters unescaped) have one home.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			raw, _ := payload.Marshal(s) // a string always encodes
			return append(b, raw...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
