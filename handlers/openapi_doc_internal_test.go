package handlers

import (
	"log/slog"
	"net/http"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"boxoffice/domain/cells"
)

// The document the tools read (issue 19): every tag an operation uses is
// declared with a description, every operation says how it is secured
// (public ones with an empty list), has a description, and no schema
// carries huma's non-standard patternDescription keyword.
func TestTheDocumentTheToolsRead(t *testing.T) {
	h := New(Config{Cells: cells.Single(&cells.Cell{Name: cells.Default}), Logger: slog.New(slog.DiscardHandler)})
	api := h.NewAPI(http.NewServeMux())
	doc := api.OpenAPI()
	var declared []string
	for _, tag := range doc.Tags {
		require.NotEmpty(t, tag.Description, "tag %s", tag.Name)
		declared = append(declared, tag.Name)
	}
	for _, used := range usedTags(doc) {
		require.True(t, slices.Contains(declared, used), "tag %q is used and not declared in tagDescriptions", used)
	}
	require.NotEmpty(t, doc.Servers)
	for path, item := range doc.Paths {
		for _, op := range operations(item) {
			require.NotNil(t, op.Security, "%s %s states no security", op.OperationID, path)
			require.NotEmpty(t, op.Description, "%s %s has no description", op.OperationID, path)
		}
	}
	yaml, err := doc.YAML()
	require.NoError(t, err)
	require.NotContains(t, string(yaml), "patternDescription:")
	require.Contains(t, string(yaml), "x-pattern-description:")
}
