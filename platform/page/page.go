// Package page is the one cursor of the API's lists: a position in a list
// ordered by (created_at, id), handed to clients as an opaque string and
// handed back for the next page. Lists newest first continue before the
// cursor, lists oldest first after it.
package page

import (
	"encoding/base64"
	"strings"
	"time"

	"github.com/google/uuid"

	"boxoffice/platform/fault"
)

// Cursor is a position in a list ordered by (created_at, id). Clients get
// it as an opaque string and hand it back for the next page.
type Cursor struct {
	CreatedAt time.Time
	ID        uuid.UUID
}

// ErrBadCursor is returned for a cursor string this package did not make.
// It is fault.CodeInvalid: the client sent something it was not given.
var ErrBadCursor = fault.New(fault.CodeInvalid, "malformed cursor")

// String encodes c as an opaque URL-safe string.
func (c Cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.CreatedAt.UTC().Format(time.RFC3339Nano) + "|" + c.ID.String()))
}

// Parse decodes a string made by Cursor.String. Returns ErrBadCursor
// for anything else.
func Parse(s string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Cursor{}, ErrBadCursor
	}
	ts, id, ok := strings.Cut(string(b), "|")
	if !ok {
		return Cursor{}, ErrBadCursor
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return Cursor{}, ErrBadCursor
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return Cursor{}, ErrBadCursor
	}
	return Cursor{CreatedAt: t, ID: u}, nil
}
