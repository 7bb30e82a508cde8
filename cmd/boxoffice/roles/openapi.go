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
	v30 := fs.Bool("3.0", false, "print the document downgraded to OpenAPI 3.0.3, for generators that read only 3.0 "+
		"(make generate builds the Go client in client/ from it); openapi.yaml is the 3.1 document")
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	// The document describes the operations, not a deployment: one cell
	// without services registers every operation, the sandbox's marked
	// test mode only (DescribeSandbox; a process serving with Stripe
	// lists and answers none of them).
	h := handlers.New(handlers.Config{
		Cells: cells.Single(&cells.Cell{Name: cells.Default}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		DescribeSandbox: true,
	})
	doc := h.NewAPI(http.NewServeMux()).OpenAPI()
	render := doc.YAML
	if *v30 {
		// huma's own downgrade of the same document: type arrays with
		// "null" become nullable, examples an example. OpenAPI 3.0 has no
		// webhooks object: what a receiver gets is not a call a client
		// makes, so the 3.0 stream leaves it out.
		doc.Webhooks = nil
		render = doc.DowngradeYAML
	}
	spec, err := render()
	if err != nil {
		return fmt.Errorf("render openapi: %w", err)
	}
	fmt.Print(string(spec))
	return nil
}
