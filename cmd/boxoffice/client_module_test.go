package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// buyerMain is a program of someone who integrates with the API: it
// constructs the client, calls an operation, reads the one problem of an
// error answer, and iterates a list by cursor.
const buyerMain = `package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/boxoffice/boxoffice/client"
)

func main() {
	ctx := context.Background()
	api, err := client.NewClientWithResponses("http://127.0.0.1:8080", client.WithHTTPClient(http.DefaultClient))
	if err != nil {
		panic(err)
	}
	res, err := api.GetTicketSigningKeyWithResponse(ctx)
	if err == nil && res.ApplicationProblemJSONDefault != nil {
		fmt.Println(res.StatusCode(), res.ApplicationProblemJSONDefault.Type)
	}
	limit := int64(50)
	for order, err := range api.AllOrders(ctx, client.ListOrdersParams{Limit: &limit}, client.WithBearer("token")) {
		var se *client.StatusError
		if errors.As(err, &se) {
			fmt.Println(se.StatusCode, se.Problem.Detail, se.RetryAfter)
			return
		}
		fmt.Println(order.ID)
	}
}
`

// buildBuyer builds buyerMain as module example.com/buyer, outside this
// module, with the client taken from clientDir: what go get gives a user
// of github.com/boxoffice/boxoffice/client, but from the tree. The go.sum
// is the client's own, so the build needs nothing the client does not.
func buildBuyer(t *testing.T, clientDir string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	gomod := "module example.com/buyer\n\ngo 1.26.0\n\n" +
		"require github.com/boxoffice/boxoffice/client v0.0.0\n\n" +
		"replace github.com/boxoffice/boxoffice/client => " + clientDir + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o600))
	sum, err := os.ReadFile(filepath.Join(clientDir, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(buyerMain), 0o600))
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "buyer"), ".")
	cmd.Dir = dir
	// -mod=mod: the client's requirements join the buyer's go.mod, as go
	// get would add them. GOWORK=off: no workspace joins the modules.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// The client is a module that builds alone: a program outside this
// module imports it by its published path and builds (issue 27: go get
// could not fetch a client inside the module boxoffice). A client that
// imported the server would not build there, and the test shows it does
// not.
func TestClientBuildsOutsideThisModule(t *testing.T) {
	t.Parallel()
	clientDir, err := filepath.Abs(filepath.Join("..", "..", "client"))
	require.NoError(t, err)

	t.Run("BuildsAndIterates", func(t *testing.T) {
		t.Parallel()
		out, err := buildBuyer(t, clientDir)
		require.NoError(t, err, "go build of a program that imports the client: %s", out)
	})

	t.Run("FailsWhenTheClientImportsTheServer", func(t *testing.T) {
		t.Parallel()
		// A copy of the client with one file that imports this module.
		copyDir := t.TempDir()
		require.NoError(t, os.CopyFS(copyDir, os.DirFS(clientDir)))
		require.NoError(t, os.WriteFile(filepath.Join(copyDir, "server.go"),
			[]byte("package client\n\nimport _ \"boxoffice/platform/auth\"\n"), 0o600))
		out, err := buildBuyer(t, copyDir)
		require.Error(t, err, "a client that imports boxoffice/... built outside the module: %s", out)
		require.True(t, strings.Contains(out, "boxoffice/platform/auth"), "the build fails on the import: %s", out)
	})
}
