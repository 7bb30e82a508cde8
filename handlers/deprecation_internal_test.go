package handlers

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/humatest"
	"github.com/stretchr/testify/require"
)

func TestDeprecatedOperation(t *testing.T) {
	t.Parallel()

	since := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	sunset := since.Add(DeprecationWindow)
	type out struct {
		Body struct {
			OK bool `json:"ok"`
		}
	}
	setup := func(t *testing.T) humatest.TestAPI {
		t.Helper()
		_, api := humatest.New(t)
		api.UseMiddleware(deprecationHeaders)
		ok := func(context.Context, *struct{}) (*out, error) { return &out{}, nil }
		huma.Register(api, deprecated(huma.Operation{
			OperationID: "old", Method: http.MethodGet, Path: "/old", Description: "The old way.",
		}, Deprecation{Since: since, Sunset: sunset}), ok)
		huma.Register(api, huma.Operation{OperationID: "new", Method: http.MethodGet, Path: "/new"}, ok)
		huma.Register(api, deprecated(huma.Operation{
			OperationID: "refused", Method: http.MethodGet, Path: "/refused", Description: "Fails.",
		}, Deprecation{Since: since, Sunset: sunset}), func(context.Context, *struct{}) (*out, error) {
			return nil, huma.Error404NotFound("gone")
		})
		declareDeprecationHeaders(api.OpenAPI())
		return api
	}

	t.Run("SendsDeprecationAndSunset", func(t *testing.T) {
		t.Parallel()
		api := setup(t)
		res := api.Get("/old")
		require.Equal(t, http.StatusOK, res.Code)
		require.Equal(t, "@1796083200", res.Header().Get("Deprecation"))
		require.Equal(t, "Sun, 30 May 2027 00:00:00 GMT", res.Header().Get("Sunset"))
	})

	t.Run("SendsThemOnErrorsToo", func(t *testing.T) {
		t.Parallel()
		res := setup(t).Get("/refused")
		require.Equal(t, http.StatusNotFound, res.Code)
		require.NotEmpty(t, res.Header().Get("Deprecation"))
		require.NotEmpty(t, res.Header().Get("Sunset"))
	})

	t.Run("NotOnOtherOperations", func(t *testing.T) {
		t.Parallel()
		res := setup(t).Get("/new")
		require.Equal(t, http.StatusOK, res.Code)
		require.Empty(t, res.Header().Get("Deprecation"))
		require.Empty(t, res.Header().Get("Sunset"))
	})

	t.Run("TheDocumentSaysSo", func(t *testing.T) {
		t.Parallel()
		op := setup(t).OpenAPI().Paths["/old"].Get
		require.True(t, op.Deprecated)
		require.Contains(t, op.Description, "Deprecated since 2026-12-01; it may stop answering after 2027-05-30")
		for code, res := range op.Responses {
			require.Contains(t, res.Headers, "Deprecation", code)
			require.Contains(t, res.Headers, "Sunset", code)
		}
		require.NotContains(t, setup(t).OpenAPI().Paths["/new"].Get.Responses["200"].Headers, "Deprecation")
	})

	t.Run("RefusesAShortWindow", func(t *testing.T) {
		t.Parallel()
		require.Panics(t, func() {
			deprecated(huma.Operation{OperationID: "x"}, Deprecation{Since: since, Sunset: since.Add(24 * time.Hour)})
		})
	})

}
