package webhooks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Payload versions of an endpoint (webhook_endpoints.payload_version):
// how the messages sent to it spell their fields. Messages are stored
// once, in version 1, and encoded in the endpoint's version when each
// attempt is sent, so a replay or a recover after the organizer moved the
// endpoint arrives in its new version.
const (
	// PayloadV1 spells fields in snake_case (order_id, seat_ids): every
	// endpoint created before version 2 existed.
	PayloadV1 = 1
	// PayloadV2 spells the same fields in camelCase (orderId, seatIds),
	// as the REST API does; nothing else differs. An endpoint gets it by
	// asking; it becomes the default in API version 2.
	PayloadV2 = 2
)

// ValidPayloadVersion reports whether v is a payload version.
func ValidPayloadVersion(v int) bool { return v == PayloadV1 || v == PayloadV2 }

// CamelCase is a version-1 field name in version 2: order_id → orderId,
// payment_intent_id → paymentIntentId; a name with no underscore is
// itself.
func CamelCase(name string) string {
	if !strings.Contains(name, "_") {
		return name
	}
	parts := strings.Split(name, "_")
	var b strings.Builder
	b.Grow(len(name))
	b.WriteString(parts[0])
	for _, p := range parts[1:] {
		if p == "" {
			continue
		}
		b.WriteString(strings.ToUpper(p[:1]))
		b.WriteString(p[1:])
	}
	return b.String()
}

// EncodeFor returns a stored (version-1) message body in payload version
// v: the same bytes for version 1; for version 2 every object key renamed
// by CamelCase, in the same order, values unchanged (numbers keep their
// digits). A body that is not JSON is an error: it was not made by this
// package.
func EncodeFor(v int, body []byte) ([]byte, error) {
	if v != PayloadV2 {
		return body, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var out bytes.Buffer
	out.Grow(len(body))
	if err := camelValue(dec, &out); err != nil {
		return nil, fmt.Errorf("webhooks: payload version 2: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("webhooks: payload version 2: trailing data after the message")
	}
	return out.Bytes(), nil
}

// camelValue copies one JSON value from dec to out, renaming the keys of
// every object in it.
func camelValue(dec *json.Decoder, out *bytes.Buffer) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			out.WriteByte('{')
			for i := 0; dec.More(); i++ {
				key, err := dec.Token()
				if err != nil {
					return err
				}
				if i > 0 {
					out.WriteByte(',')
				}
				if err := writeJSON(out, CamelCase(key.(string))); err != nil {
					return err
				}
				out.WriteByte(':')
				if err := camelValue(dec, out); err != nil {
					return err
				}
			}
			out.WriteByte('}')
		case '[':
			out.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					out.WriteByte(',')
				}
				if err := camelValue(dec, out); err != nil {
					return err
				}
			}
			out.WriteByte(']')
		}
		_, err := dec.Token() // the closing delimiter
		return err
	case json.Number:
		out.WriteString(t.String())
		return nil
	default: // string, bool, nil
		return writeJSON(out, t)
	}
}

func writeJSON(out *bytes.Buffer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	out.Write(b)
	return nil
}
