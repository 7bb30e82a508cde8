package handlers_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/catalog"
	"boxoffice/handlers"
	"boxoffice/testkit/dbtest"
)

// queryCounter counts the queries of one sqlc name sent through a pool.
type queryCounter struct {
	name string
	n    atomic.Int64
}

func (q *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "-- name: "+q.name+" ") {
		q.n.Add(1)
	}
	return ctx
}

func (q *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// tracedPool is a second pool on pool's database whose queries named
// name (EventGetByID by default) are counted.
func tracedPool(t *testing.T, pool *pgxpool.Pool, name ...string) (*pgxpool.Pool, *queryCounter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
	require.NoError(t, err)
	counter := &queryCounter{name: "EventGetByID"}
	if len(name) > 0 {
		counter.name = name[0]
	}
	cfg.ConnConfig.Tracer = counter
	traced, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(traced.Close)
	return traced, counter
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	require.NoError(t, err)
	out, err := io.ReadAll(zr)
	require.NoError(t, err)
	return out
}

func TestEventReads(t *testing.T) {
	t.Parallel()
	// setupCached serves the catalog as `serve` does: seat maps cached a
	// second, events a minute, unknown ids five seconds.
	setupCached := func(t *testing.T, opts ...func(*handlers.Config)) (*testBundle, *queryCounter) {
		t.Helper()
		pool := dbtest.New(t)
		traced, counter := tracedPool(t, pool)
		opts = append([]func(*handlers.Config){func(c *handlers.Config) {
			cellOf(c).Catalog = catalog.New(traced).WithSeatMapCache(time.Second).WithEventCache(time.Minute, 5*time.Second)
		}}, opts...)
		return setupPool(t, pool, opts...), counter
	}

	for _, path := range []string{"/seats", ""} {
		name := map[string]string{"/seats": "SeatMap", "": "Event"}[path]

		t.Run(name+"GzipDecodesToTheSameJSON", func(t *testing.T) {
			t.Parallel()
			b, _ := setupCached(t)
			ev := b.createEvent(t, b.organizer(t), map[string]any{"name": "Floor", "rows": 20, "seatsPerRow": 50, "priceMinor": 5000})
			// Without the header Go's client asks for gzip itself and
			// decompresses out of sight.
			plain := b.do(t, http.MethodGet, "/v1/events/"+ev.ID+path, map[string]string{"Accept-Encoding": "identity"}, nil)
			require.Equal(t, http.StatusOK, plain.status, "%s", plain.body)
			require.Empty(t, plain.header.Get("Content-Encoding"))
			require.Contains(t, plain.header.Values("Vary"), "Accept-Encoding")
			require.Equal(t, "application/json", plain.header.Get("Content-Type"))
			plain.json(t)

			zipped := b.do(t, http.MethodGet, "/v1/events/"+ev.ID+path, map[string]string{"Accept-Encoding": "br, gzip;q=0.8"}, nil)
			require.Equal(t, http.StatusOK, zipped.status, "%s", zipped.body)
			require.Contains(t, zipped.header.Values("Vary"), "Accept-Encoding")
			if path == "" && zipped.header.Get("Content-Encoding") == "" {
				require.JSONEq(t, string(plain.body), string(zipped.body), "an event too small to be worth compressing")
				return
			}
			require.Equal(t, "gzip", zipped.header.Get("Content-Encoding"))
			require.Less(t, len(zipped.body), len(plain.body)/4)
			require.JSONEq(t, string(plain.body), string(gunzip(t, zipped.body)))
			require.NotEqual(t, plain.header.Get("ETag"), zipped.header.Get("ETag"), "each representation has its own strong ETag")

			refused := b.do(t, http.MethodGet, "/v1/events/"+ev.ID+path, map[string]string{"Accept-Encoding": "gzip;q=0, identity"}, nil)
			require.Empty(t, refused.header.Get("Content-Encoding"))
			require.JSONEq(t, string(plain.body), string(refused.body))
		})

		t.Run(name+"IfNoneMatchIsNotModified", func(t *testing.T) {
			t.Parallel()
			b, _ := setupCached(t)
			ev := b.createEvent(t, b.organizer(t))
			first := b.do(t, http.MethodGet, "/v1/events/"+ev.ID+path, nil, nil)
			require.Equal(t, http.StatusOK, first.status, "%s", first.body)
			etag := first.header.Get("ETag")
			require.Regexp(t, `^"[^"]+"$`, etag, "a strong ETag")
			require.Contains(t, first.header.Get("Cache-Control"), "public")
			if path == "/seats" {
				require.Equal(t, "public, max-age=1", first.header.Get("Cache-Control"), "as fresh as the seat-map cache")
			}
			for _, inm := range []string{etag, `"other", ` + etag, "W/" + etag, "*"} {
				again := b.do(t, http.MethodGet, "/v1/events/"+ev.ID+path, map[string]string{"If-None-Match": inm}, nil)
				require.Equal(t, http.StatusNotModified, again.status, "If-None-Match %s: %s", inm, again.body)
				require.Empty(t, again.body)
				require.Equal(t, etag, again.header.Get("ETag"))
			}
			stale := b.do(t, http.MethodGet, "/v1/events/"+ev.ID+path, map[string]string{"If-None-Match": `"other"`}, nil)
			require.Equal(t, http.StatusOK, stale.status)
			require.Equal(t, first.body, stale.body)
		})
	}

	t.Run("SeatMapETagChangesWhenTheMapDoes", func(t *testing.T) {
		t.Parallel()
		b, _ := setupCached(t)
		ev := b.createEvent(t, b.organizer(t))
		before := b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/seats", nil, nil)
		etag := before.header.Get("ETag")
		require.NotEmpty(t, etag)
		_, tok := b.buyer(t)
		require.Equal(t, http.StatusAccepted, b.hold(t, tok, b.admit(t, tok, ev.ID), ev.ID, "k", ev.Seats[0]).status)

		var after response
		require.Eventually(t, func() bool {
			after = b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/seats", map[string]string{"If-None-Match": etag}, nil)
			return after.status == http.StatusOK
		}, 10*time.Second, 50*time.Millisecond, "once the cached map expires, the held seat changes it")
		require.NotEqual(t, etag, after.header.Get("ETag"))
		require.Equal(t, "held", after.json(t)["seats"].([]any)[0].(map[string]any)["status"])
	})

	t.Run("UnknownEventIsAnsweredFromTheNegativeCache", func(t *testing.T) {
		t.Parallel()
		b, counter := setupCached(t)
		unknown := "/v1/events/" + uuid.NewString()
		for _, path := range []string{unknown, unknown, unknown + "/seats", unknown} {
			res := b.do(t, http.MethodGet, path, nil, nil)
			require.Equal(t, http.StatusNotFound, res.status, "%s", res.body)
			require.Equal(t, handlers.TypeNotFound, problemType(t, res))
		}
		require.EqualValues(t, 1, counter.n.Load(), "only the first request reached the database")
	})

	t.Run("RateLimitedPerAddress", func(t *testing.T) {
		t.Parallel()
		const perSecond = 3
		b, _ := setupCached(t, func(c *handlers.Config) { c.EventReadsPerSecond = perSecond })
		start := time.Now()
		ev := b.createEvent(t, b.organizer(t)) // one read of the seat map
		statuses := map[int]int{}
		for i := range 10 {
			path := "/v1/events/" + ev.ID
			if i%2 == 0 {
				path += "/seats"
			}
			res := b.do(t, http.MethodGet, path, nil, nil)
			statuses[res.status]++
			if res.status == http.StatusTooManyRequests {
				requireRateLimited(t, res)
			}
		}
		// The burst is a second's worth, less the seat map's read; the
		// bucket refills perSecond a second while the requests run (most
		// of a second on a loaded machine, not nothing).
		most := perSecond + int(time.Since(start).Seconds()*perSecond)
		require.GreaterOrEqual(t, statuses[http.StatusOK], perSecond-1)
		require.LessOrEqual(t, statuses[http.StatusOK], most)
		require.Equal(t, 10, statuses[http.StatusOK]+statuses[http.StatusTooManyRequests], "%v", statuses)
		if most < 10 {
			require.Positive(t, statuses[http.StatusTooManyRequests], "more requests than the bucket can pass are refused")
		}
	})
}
