package roles

import (
	"bytes"
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/testkit/dbtest"
)

func TestAuditCommand(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	env := map[string]string{"DATABASE_URL": url}
	var out bytes.Buffer
	require.NoError(t, runAudit(context.Background(), nil, func(k string) string { return env[k] }, &out))
	require.Contains(t, out.String(), "All 15 invariants hold.")

	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), `INSERT INTO outbox (id, subject, event_type, aggregate_id, envelope, created_at)
		VALUES (gen_random_uuid(), 'ticketing.order.HoldCreated', 'HoldCreated', gen_random_uuid(), '{}', now() - interval '10 minutes')`)
	require.NoError(t, err)

	out.Reset()
	err = runAudit(context.Background(), []string{"-outbox-age", "5m"}, func(k string) string { return env[k] }, &out)
	require.ErrorIs(t, err, errAuditFailed, "a broken invariant makes the command fail")
	require.Contains(t, out.String(), "FAIL  outbox_unpublished")

	out.Reset()
	require.NoError(t, runAudit(context.Background(), []string{"-outbox-age", "1h"}, func(k string) string { return env[k] }, &out),
		"the threshold decides when a row in flight counts as stuck")
}
