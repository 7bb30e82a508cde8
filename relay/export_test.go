package relay

import (
	"context"

	"github.com/google/uuid"
)

// SetAfterPublishFunc installs a crash injector for tests. f runs after
// JetStream has acknowledged a batch (ids are the acknowledged rows) and
// before the relay deletes them from the outbox. When f returns an error, Run
// returns that error at once and the relay deletes, releases and settles
// nothing more — its claimed rows wait for their lease, exactly as if the
// process had been killed at that point. Call it before Run.
func SetAfterPublishFunc(r *Relay, f func(ctx context.Context, ids []uuid.UUID) error) {
	r.afterPublishFunc = f
}
