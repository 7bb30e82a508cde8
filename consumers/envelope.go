package consumers

import (
	"encoding/json"
	"errors"

	"github.com/google/uuid"

	"boxoffice/platform/outbox"
)

// decodeEnvelope decodes a message body into an envelope and checks the
// fields every consumer relies on. Its errors are *invalidEnvelopeError and
// never quote the body. Unknown fields are ignored: a newer producer may
// add fields within a schema version.
func decodeEnvelope(data []byte) (outbox.Envelope, error) {
	var ev outbox.Envelope
	if err := json.Unmarshal(data, &ev); err != nil {
		var syntaxErr *json.SyntaxError
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syntaxErr):
			return ev, &invalidEnvelopeError{"not JSON"}
		case errors.As(err, &typeErr) && typeErr.Field != "":
			return ev, &invalidEnvelopeError{"field " + typeErr.Field + " has the wrong type"}
		default:
			return ev, &invalidEnvelopeError{"does not decode"}
		}
	}
	switch {
	case ev.EventID == uuid.Nil:
		return ev, &invalidEnvelopeError{"missing event_id"}
	case ev.EventType == "":
		return ev, &invalidEnvelopeError{"missing event_type"}
	case ev.SchemaVersion < 1:
		return ev, &invalidEnvelopeError{"missing schema_version"}
	case ev.AggregateType == "":
		return ev, &invalidEnvelopeError{"missing aggregate_type"}
	case ev.AggregateID == uuid.Nil:
		return ev, &invalidEnvelopeError{"missing aggregate_id"}
	}
	return ev, nil
}
