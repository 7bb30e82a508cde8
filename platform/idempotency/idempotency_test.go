package idempotency_test

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/idempotency"
	"boxoffice/testkit/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type answer struct {
	ID     uuid.UUID `json:"id"`
	Secret string    `json:"secret"`
}

// reversed is a Sealer for tests: what it stores is not the clear text.
type reversed struct{}

func (reversed) Seal(id uuid.UUID, secret string) (string, error) {
	return "sealed:" + id.String() + ":" + base64.StdEncoding.EncodeToString([]byte(secret)), nil
}

func (reversed) Open(id uuid.UUID, stored string) (string, error) {
	raw, ok := strings.CutPrefix(stored, "sealed:"+id.String()+":")
	if !ok {
		return "", errors.New("sealed for another id")
	}
	b, err := base64.StdEncoding.DecodeString(raw)
	return string(b), err
}

func TestDo(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		pool *pgxpool.Pool
		runs atomic.Int32
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{pool: dbtest.New(t)}
	}
	request := func(t *testing.T, key string, body any) idempotency.Request {
		t.Helper()
		h, err := idempotency.Hash("create-thing", body)
		require.NoError(t, err)
		return idempotency.Request{Principal: uuid.MustParse("00000000-0000-0000-0000-000000000001"), Key: key, Operation: "create-thing", Hash: h}
	}
	// create writes a row in tx, as a service's Tx method does, and
	// answers with a fresh secret.
	create := func(b *testBundle) func(ctx context.Context, tx pgx.Tx) (answer, error) {
		return func(ctx context.Context, tx pgx.Tx) (answer, error) {
			b.runs.Add(1)
			a := answer{ID: uuid.New(), Secret: "s3cret_" + uuid.NewString()}
			_, err := tx.Exec(ctx, "INSERT INTO organizers (id) VALUES ($1)", a.ID)
			return a, err
		}
	}

	t.Run("ConcurrentRetriesRunOnceAndGetTheFirstAnswer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := request(t, "key-1", map[string]any{"name": "x"})
		const twins = 8
		answers := make([]answer, twins)
		replays := make([]bool, twins)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range twins {
			wg.Go(func() {
				<-start
				var err error
				answers[i], replays[i], err = idempotency.Do(t.Context(), b.pool, r, create(b))
				require.NoError(t, err)
			})
		}
		close(start)
		wg.Wait()
		require.EqualValues(t, 1, b.runs.Load())
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM organizers"))
		first := 0
		for i := range twins {
			require.Equal(t, answers[0], answers[i])
			if !replays[i] {
				first++
			}
		}
		require.Equal(t, 1, first, "one answer is the first, the others replays")
	})

	t.Run("SameKeyOtherRequestConflicts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, _, err := idempotency.Do(t.Context(), b.pool, request(t, "key-1", map[string]any{"name": "x"}), create(b))
		require.NoError(t, err)
		_, _, err = idempotency.Do(t.Context(), b.pool, request(t, "key-1", map[string]any{"name": "y"}), create(b))
		require.ErrorIs(t, err, idempotency.ErrConflict)
		other := request(t, "key-1", map[string]any{"name": "x"})
		other.Operation = "delete-thing"
		_, _, err = idempotency.Do(t.Context(), b.pool, other, create(b))
		require.ErrorIs(t, err, idempotency.ErrConflict)
		require.EqualValues(t, 1, b.runs.Load())
		// Another principal's same key is its own.
		mine := request(t, "key-1", map[string]any{"name": "y"})
		mine.Principal = uuid.New()
		_, replayed, err := idempotency.Do(t.Context(), b.pool, mine, create(b))
		require.NoError(t, err)
		require.False(t, replayed)
	})

	t.Run("AFailedRequestBindsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := request(t, "key-1", map[string]any{"name": "x"})
		boom := errors.New("boom")
		_, _, err := idempotency.Do(t.Context(), b.pool, r, func(ctx context.Context, tx pgx.Tx) (answer, error) {
			_, _ = create(b)(ctx, tx)
			return answer{}, boom
		})
		require.ErrorIs(t, err, boom)
		require.EqualValues(t, 0, dbtest.Count(t, b.pool, "SELECT count(*) FROM organizers"))
		_, replayed, err := idempotency.Do(t.Context(), b.pool, r, create(b))
		require.NoError(t, err)
		require.False(t, replayed, "the key was free")
	})

	t.Run("AnExpiredKeyIsFree", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := request(t, "key-1", map[string]any{"name": "x"})
		first, _, err := idempotency.Do(t.Context(), b.pool, r, create(b))
		require.NoError(t, err)
		dbtest.Exec(t, b.pool, "UPDATE idempotent_requests SET expires_at = now() - interval '1 second'")
		again, replayed, err := idempotency.Do(t.Context(), b.pool, r, create(b))
		require.NoError(t, err)
		require.False(t, replayed)
		require.NotEqual(t, first, again)
	})

	t.Run("ASecretIsStoredSealed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := request(t, "key-1", map[string]any{"name": "x"})
		r.Sealer = reversed{}
		first, _, err := idempotency.Do(t.Context(), b.pool, r, create(b))
		require.NoError(t, err)
		require.EqualValues(t, 0, dbtest.Count(t, b.pool,
			"SELECT count(*) FROM idempotent_requests WHERE NOT sealed OR position(convert_to($1, 'UTF8') in response) > 0", first.Secret))
		again, replayed, err := idempotency.Do(t.Context(), b.pool, r, create(b))
		require.NoError(t, err)
		require.True(t, replayed)
		require.Equal(t, first, again)
	})
}
