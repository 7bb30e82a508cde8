package roles

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"boxoffice/domain/cells"
	"boxoffice/handlers"
)

func runOpenAPI(args []string) error {
	fs := flag.NewFlagSet("openapi", flag.ContinueOnError)
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	// The document describes the operations, not a deployment: one cell
	// without services registers every operation but the sandbox's, as
	// `serve` does with Stripe payments.
	h := handlers.New(handlers.Config{
		Cells: cells.Single(&cells.Cell{Name: cells.Default}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	spec, err := h.NewAPI(http.NewServeMux()).OpenAPI().YAML()
	if err != nil {
		return fmt.Errorf("render openapi: %w", err)
	}
	fmt.Print(string(spec))
	return nil
}
