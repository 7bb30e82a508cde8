package handlers_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"boxoffice/handlers"
	"boxoffice/testkit/dbtest"
)

// CORS is opt-in: with no origins listed no answer carries a CORS header;
// with some, their pages' preflights and requests are answered with the
// headers a browser needs, and other origins get none.
func TestCORSIsAnAllowList(t *testing.T) {
	t.Parallel()

	const shop = "https://shop.example.com"
	preflight := func(origin string) map[string]string {
		return map[string]string{
			"Origin": origin, "Access-Control-Request-Method": "POST",
			"Access-Control-Request-Headers": "authorization, content-type, idempotency-key, x-admission-token",
		}
	}

	t.Run("NoneByDefault", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res := b.do(t, http.MethodGet, "/v1/admission-keys", map[string]string{"Origin": shop}, nil)
		require.Equal(t, http.StatusOK, res.status)
		require.Empty(t, res.header.Get("Access-Control-Allow-Origin"))
		res = b.do(t, http.MethodOptions, "/v1/events/0193/holds", preflight(shop), nil)
		require.Empty(t, res.header.Get("Access-Control-Allow-Origin"))
		require.NotEqual(t, http.StatusNoContent, res.status)
	})

	t.Run("ListedOriginsOnly", func(t *testing.T) {
		t.Parallel()
		b := setupPool(t, dbtest.New(t), func(cfg *handlers.Config) { cfg.CORSOrigins = []string{shop} })

		res := b.do(t, http.MethodOptions, "/v1/events/0193/holds", preflight(shop), nil)
		require.Equal(t, http.StatusNoContent, res.status)
		require.Equal(t, shop, res.header.Get("Access-Control-Allow-Origin"))
		require.Contains(t, res.header.Get("Access-Control-Allow-Headers"), "Idempotency-Key")
		require.Contains(t, res.header.Get("Access-Control-Allow-Headers"), "X-Admission-Token")
		require.Contains(t, res.header.Get("Access-Control-Allow-Headers"), "traceparent", "a traced page's trace goes on into the API's")
		require.Contains(t, res.header.Get("Access-Control-Allow-Headers"), "X-Presale-Code", "a presale page sends its buyer's code")
		require.Contains(t, res.header.Get("Access-Control-Allow-Methods"), "POST")
		require.Empty(t, res.header.Get("Access-Control-Allow-Credentials"), "tokens travel in Authorization, not cookies")

		res = b.do(t, http.MethodGet, "/v1/admission-keys", map[string]string{"Origin": shop}, nil)
		require.Equal(t, http.StatusOK, res.status)
		require.Equal(t, shop, res.header.Get("Access-Control-Allow-Origin"))
		require.Contains(t, res.header.Get("Access-Control-Expose-Headers"), "X-Correlation-Id")
		require.Contains(t, res.header.Values("Vary"), "Origin")

		for _, other := range []string{"https://evil.example.com", "https://shop.example.com.evil.example", "null"} {
			res = b.do(t, http.MethodGet, "/v1/admission-keys", map[string]string{"Origin": other}, nil)
			require.Equal(t, http.StatusOK, res.status)
			require.Empty(t, res.header.Get("Access-Control-Allow-Origin"), other)
			res = b.do(t, http.MethodOptions, "/v1/events/0193/holds", preflight(other), nil)
			require.Empty(t, res.header.Get("Access-Control-Allow-Origin"), other)
		}
	})
}

func TestValidCORSOrigin(t *testing.T) {
	t.Parallel()
	for origin, ok := range map[string]bool{
		"https://shop.example.com":      true,
		"http://localhost:5173":         true,
		"*":                             false,
		"https://shop.example.com/":     false,
		"https://shop.example.com/app":  false,
		"shop.example.com":              false,
		"ftp://shop.example.com":        false,
		"https://user@shop.example.com": false,
		"null":                          false,
	} {
		require.Equal(t, ok, handlers.ValidCORSOrigin(origin), origin)
	}
}
