package handlers

import (
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
)

// Deprecation is when an operation was deprecated and when it goes away
// (docs/versioning.md: a deprecated operation is served, unchanged, for
// at least DeprecationWindow after Since, and the CHANGELOG says so).
type Deprecation struct {
	// Since is when the operation was deprecated: the release that did it.
	Since time.Time
	// Sunset is when it may stop answering; at least DeprecationWindow
	// after Since.
	Sunset time.Time
}

// DeprecationWindow is the least time a deprecated operation or field is
// still served after the release that deprecates it.
const DeprecationWindow = 180 * 24 * time.Hour

const deprecationKey = "deprecation"

// deprecated marks op deprecated: the document says so (deprecated: true,
// the dates in its description, the Deprecation and Sunset headers on
// each of its responses) and every answer to it carries the headers
// (deprecationHeaders), so that a client learns it from the traffic
// itself, not only from the changelog. It panics (a programmer error, at
// registration) on a sunset sooner than DeprecationWindow.
func deprecated(op huma.Operation, d Deprecation) huma.Operation {
	if d.Sunset.Sub(d.Since) < DeprecationWindow {
		panic("handlers: " + op.OperationID + " sunsets less than DeprecationWindow after its deprecation")
	}
	op.Deprecated = true
	op.Description += " Deprecated since " + d.Since.UTC().Format(time.DateOnly) + "; it may stop answering after " +
		d.Sunset.UTC().Format(time.DateOnly) + " (the Deprecation and Sunset headers of each answer say so; docs/versioning.md)."
	if op.Metadata == nil {
		op.Metadata = map[string]any{}
	}
	op.Metadata[deprecationKey] = d
	return op
}

// deprecationHeaders sets, on every answer to a deprecated operation
// (errors included), Deprecation (RFC 9745: @ and the Unix time it was
// deprecated) and Sunset (RFC 8594: the HTTP date it may go away). It
// runs before authentication, so that even a refused call is told.
func deprecationHeaders(ctx huma.Context, next func(huma.Context)) {
	if d, ok := ctx.Operation().Metadata[deprecationKey].(Deprecation); ok {
		ctx.SetHeader("Deprecation", "@"+strconv.FormatInt(d.Since.Unix(), 10))
		ctx.SetHeader("Sunset", d.Sunset.UTC().Format(http.TimeFormat))
	}
	next(ctx)
}

// declareDeprecationHeaders documents the headers deprecationHeaders sets
// on every response of each deprecated operation, so that the contract
// tests (which refuse undeclared headers) and clients see them.
func declareDeprecationHeaders(doc *huma.OpenAPI) {
	for _, item := range doc.Paths {
		for _, op := range operations(item) {
			if !op.Deprecated {
				continue
			}
			for _, res := range op.Responses {
				if res.Headers == nil {
					res.Headers = map[string]*huma.Param{}
				}
				res.Headers["Deprecation"] = &huma.Param{
					Description: "RFC 9745: this operation is deprecated, since the time given (@ and Unix seconds).",
					Schema:      &huma.Schema{Type: huma.TypeString, Pattern: `^@-?[0-9]+$`},
				}
				res.Headers["Sunset"] = &huma.Param{
					Description: "RFC 8594: the HTTP date after which this operation may stop answering.",
					Schema:      &huma.Schema{Type: huma.TypeString},
				}
			}
		}
	}
}
