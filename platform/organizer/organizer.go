// Package organizer is the one writer of the organizers table: an
// organizer's row in a purchase cell, created on the first use of its id
// there (its first event, its first API key) and never changed. The row is
// what the other tables of the organizer refer to, and what pins the
// organizer to the cell (cells.Router finds it by the row).
//
// It is a package of its own, in platform, because two floors ensure the
// row: the catalog (domain/catalog) before an event, and the API keys
// (platform/apikey) before a key, which cannot ask a floor above. It owns
// no policy: whoever uses an organizer's id in a cell ensures its row
// first, in the same transaction.
package organizer

import (
	"context"

	"github.com/google/uuid"

	"boxoffice/platform/db"
	"boxoffice/sqlcgen"
)

// Ensure creates the organizer's row on the first use of id and is a
// no-op afterwards. It runs one statement on d (pass the transaction that
// uses the organizer, so that the row commits with it).
func Ensure(ctx context.Context, d db.DBTX, id uuid.UUID) error {
	return sqlcgen.New().OrganizerEnsure(ctx, d, id)
}
