package outbox_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"boxoffice/platform/outbox"
)

// OrderTypes lists every order event type: the string constants of the
// const block that declares TypeHoldCreated, no more and no fewer, so a
// type added there and not to the list fails here, not in a consumer
// that never receives it.
func TestOrderTypesListsEveryOrderType(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "outbox.go", nil, 0)
	require.NoError(t, err)
	var declared []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		var block []string
		saga := false
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				saga = saga || name.Name == "TypeHoldCreated"
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					block = append(block, v)
				}
			}
		}
		if saga {
			declared = block
		}
	}
	require.Len(t, declared, 16, "the const block of the order event types")
	require.ElementsMatch(t, declared, outbox.OrderTypes)
}
