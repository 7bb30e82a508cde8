package webhooks

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/testkit/dbtest"
)

// publicService is a Service whose guard refuses private addresses and
// resolves the test's public names without DNS.
func publicService(t *testing.T, b *testBundle, maxEndpoints int) *Service {
	t.Helper()
	public := [][]netip.Addr{addrs("93.184.216.34")}
	return NewService(b.pool, ServiceConfig{
		Guard: &Guard{Resolver: newFakeResolver(map[string][][]netip.Addr{
			"hooks.example.com": public, "Hooks.Example.COM": public, "other.example.com": public,
		})},
		MaxEndpoints: maxEndpoints,
		Keys:         testKeys,
		Logger:       b.logger,
	})
}

// race runs f n times at once, released together, and returns the errors.
func race(n int, f func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = f(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

func TestEndpointLimit(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentCreatesStopExactlyAtTheLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const limit, n = 5, 24
		svc := publicService(t, b, limit)
		org, other := uuid.New(), uuid.New()
		errs := race(n, func(i int) error {
			e, err := svc.Create(context.Background(), org, EndpointParams{URL: fmt.Sprintf("https://hooks.example.com/%d", i)})
			if err == nil {
				b.remember(e.Secret)
			}
			return err
		})
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
				continue
			}
			require.ErrorIs(t, err, ErrEndpointLimit)
		}
		require.Equal(t, limit, ok, "exactly the limit was created")
		require.Equal(t, int64(limit), dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_endpoints WHERE organizer_id = $1", org))

		e, err := svc.Create(context.Background(), other, EndpointParams{URL: "https://hooks.example.com/0"})
		require.NoError(t, err, "the limit is per organizer")
		b.remember(e.Secret)
	})

	t.Run("DisabledEndpointsCountDeletedOnesDoNot", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		svc := publicService(t, b, 2)
		ctx := context.Background()
		org := uuid.New()
		a, err := svc.Create(ctx, org, EndpointParams{URL: "https://hooks.example.com/a"})
		require.NoError(t, err)
		d, err := svc.Create(ctx, org, EndpointParams{URL: "https://hooks.example.com/d", Disabled: true})
		require.NoError(t, err)
		b.remember(a.Secret)
		b.remember(d.Secret)
		_, err = svc.Create(ctx, org, EndpointParams{URL: "https://hooks.example.com/c"})
		require.ErrorIs(t, err, ErrEndpointLimit)
		require.NoError(t, svc.Delete(ctx, org, d.ID))
		c, err := svc.Create(ctx, org, EndpointParams{URL: "https://hooks.example.com/c"})
		require.NoError(t, err)
		b.remember(c.Secret)
	})

	t.Run("DefaultsTo20", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 20, NewService(nil, ServiceConfig{Keys: testKeys, Logger: setup(t).logger}).MaxEndpoints())
	})
}

func TestEndpointURLOncePerOrganizer(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentCreatesOfOneURLMakeOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		svc := publicService(t, b, 0)
		org := uuid.New()
		errs := race(10, func(int) error {
			e, err := svc.Create(context.Background(), org, EndpointParams{URL: "https://hooks.example.com/hook"})
			if err == nil {
				b.remember(e.Secret)
			}
			return err
		})
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
				continue
			}
			require.ErrorIs(t, err, ErrDuplicateURL)
		}
		require.Equal(t, 1, ok)
		require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_endpoints WHERE organizer_id = $1", org))
	})

	t.Run("SpellingsOfOneURLAreOneURL", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		svc := publicService(t, b, 0)
		ctx := context.Background()
		org := uuid.New()
		e, err := svc.Create(ctx, org, EndpointParams{URL: "https://hooks.example.com/hook?x=1", Disabled: true})
		require.NoError(t, err)
		b.remember(e.Secret)
		for _, u := range []string{
			"https://hooks.example.com/hook?x=1",
			"HTTPS://Hooks.Example.COM/hook?x=1",
			"https://hooks.example.com:443/hook?x=1",
			"https://hooks.example.com./hook?x=1",
		} {
			_, err := svc.Create(ctx, org, EndpointParams{URL: u})
			require.ErrorIs(t, err, ErrDuplicateURL, "%s (the existing one is disabled: it still counts)", u)
		}
		for _, u := range []string{
			"https://hooks.example.com/Hook?x=1", // paths are case-sensitive
			"https://hooks.example.com/hook?x=2",
			"https://hooks.example.com:8443/hook?x=1",
			"https://other.example.com/hook?x=1",
		} {
			e, err := svc.Create(ctx, org, EndpointParams{URL: u})
			require.NoError(t, err, u)
			b.remember(e.Secret)
		}
		e, err = svc.Create(ctx, uuid.New(), EndpointParams{URL: "https://hooks.example.com/hook?x=1"})
		require.NoError(t, err, "another organizer may use the same URL")
		b.remember(e.Secret)
	})

	t.Run("UpdateToAnotherEndpointsURLIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		svc := publicService(t, b, 0)
		ctx := context.Background()
		org := uuid.New()
		a, err := svc.Create(ctx, org, EndpointParams{URL: "https://hooks.example.com/a"})
		require.NoError(t, err)
		c, err := svc.Create(ctx, org, EndpointParams{URL: "https://hooks.example.com/c"})
		require.NoError(t, err)
		b.remember(a.Secret)
		b.remember(c.Secret)

		taken := "https://Hooks.Example.COM:443/a"
		_, err = svc.Update(ctx, org, c.ID, EndpointUpdate{URL: &taken})
		require.ErrorIs(t, err, ErrDuplicateURL)
		got, err := svc.Get(ctx, org, c.ID)
		require.NoError(t, err)
		require.Equal(t, "https://hooks.example.com/c", got.URL, "nothing was written")

		same := "https://hooks.example.com/c"
		_, err = svc.Update(ctx, org, c.ID, EndpointUpdate{URL: &same})
		require.NoError(t, err, "an endpoint keeps its own URL")
		moved := "https://hooks.example.com/moved"
		_, err = svc.Update(ctx, org, a.ID, EndpointUpdate{URL: &moved})
		require.NoError(t, err)
		freed := "https://hooks.example.com/a"
		_, err = svc.Update(ctx, org, c.ID, EndpointUpdate{URL: &freed})
		require.NoError(t, err, "a URL given up is free again")
	})
}

func TestURLKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"https://hooks.example.com/hook", "https://hooks.example.com/hook"},
		{"HTTPS://Hooks.EXAMPLE.com", "https://hooks.example.com/"},
		{"https://hooks.example.com.:443/a?b=c", "https://hooks.example.com/a?b=c"},
		{"http://hooks.example.com:80/a", "http://hooks.example.com/a"},
		{"http://hooks.example.com:443/a", "http://hooks.example.com:443/a"},
		{"https://[2606:2800:0220:0001::1]:443/h", "https://[2606:2800:220:1::1]/h"},
		{"https://[::FFFF:93.184.216.34]/h", "https://93.184.216.34/h"},
		{"https://hooks.example.com/A%2fb", "https://hooks.example.com/A%2fb"},
	} {
		u, err := url.Parse(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, URLKey(u), tc.in)
	}
}
