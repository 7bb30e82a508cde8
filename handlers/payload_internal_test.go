package handlers

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/danielgtaylor/huma/v2"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/cells"
)

// The API's JSON format is payload's: a nil slice an operation returns
// is sent as [], never null, whatever the handler forgot.
func TestNilSlicesAreSentAsEmptyArrays(t *testing.T) {
	t.Parallel()
	h := New(Config{Cells: cells.Single(&cells.Cell{Name: cells.Default}), Logger: slog.New(slog.DiscardHandler)})
	mux := http.NewServeMux()
	api := h.NewAPI(mux)
	type item struct {
		Tags []string `json:"tags"`
	}
	type out struct {
		Body struct {
			Items []item          `json:"items"`
			None  []item          `json:"none"`
			ByID  map[string]item `json:"byId"`
		}
	}
	huma.Register(api, huma.Operation{OperationID: "nil-lists", Method: http.MethodGet, Path: "/nil-lists"},
		func(context.Context, *struct{}) (*out, error) {
			o := &out{}
			o.Body.Items = []item{{}}
			return o, nil
		})
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/nil-lists", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.JSONEq(t, `{"items":[{"tags":[]}],"none":[],"byId":{}}`, rec.Body.String())
}
