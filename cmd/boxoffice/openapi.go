package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"boxoffice/handlers"
)

func runOpenAPI(args []string) error {
	fs := flag.NewFlagSet("openapi", flag.ExitOnError)
	_ = fs.Parse(args)
	h := handlers.New(handlers.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	spec, err := h.NewAPI(http.NewServeMux()).OpenAPI().YAML()
	if err != nil {
		return fmt.Errorf("render openapi: %w", err)
	}
	fmt.Print(string(spec))
	return nil
}
