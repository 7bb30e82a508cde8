package handlers

import (
	"slices"

	"github.com/danielgtaylor/huma/v2"
)

// tagDescriptions declares every tag an operation uses, in the order the
// reference shows them. TestEveryTagIsDeclared fails on a tag used and not
// declared here.
var tagDescriptions = []*huma.Tag{
	{Name: "Events", Description: "An organizer's events and their seats: create an event, list yours, read its seat map, its sales and its orders."},
	{Name: "Waiting room", Description: "Join an onsale's waiting room and poll your place until you are admitted with an admission token."},
	{Name: "Holds", Description: "Hold seats with an admission token and an Idempotency-Key: the hold is the order, awaiting payment."},
	{Name: "Orders", Description: "Your orders and their tickets; cancel one awaiting payment; follow one as it moves; the organizer's refunds."},
	{Name: "Tickets", Description: "What door scanners need to verify tickets offline: the signing key and the revocation list."},
	{Name: "Check-in", Description: "The door: scan a ticket once, upload offline scans in batches, count entries per gate."},
	{Name: "Onsale", Description: "An organizer's onsale settings: opening time, admission rate, per-buyer limit, hold lifetime, pause; revoke admissions."},
	{Name: "Webhooks", Description: "Signed, retried, replayable Standard Webhooks to the organizer's systems: endpoints, messages and their attempts."},
	{Name: "Payments", Description: "The payment provider's webhook: Stripe events, verified before they are read."},
	{Name: "Sandbox", Description: "Development only (BOXOFFICE_PAYMENTS=sandbox): play the buyer's part at the payment provider."},
	{Name: "Operations", Description: "Liveness and readiness, for load balancers and orchestrators."},
}

// servers say where the API is: a deployment serves these paths at its
// own origin; the default is where `make run` and `docker compose up`
// start it (api-1; compose's api-2 is on :8081).
var servers = []*huma.Server{{
	URL:         "{scheme}://{host}",
	Description: "Your deployment; by default the one `make run` starts.",
	Variables: map[string]*huma.ServerVariable{
		"scheme": {Default: "http", Enum: []string{"http", "https"}, Description: "https in production"},
		"host":   {Default: "localhost:8080", Description: "the API's host and port"},
	},
}}

// finishDocument completes the OpenAPI document once every operation is
// registered: the declared tags, and huma's patternDescription (the words
// of a pattern's validation message, not a JSON Schema keyword) moved to
// an x- extension where the tools expect extensions. The messages were
// computed from it at registration and stay as they are.
func finishDocument(api huma.API) {
	doc := api.OpenAPI()
	doc.Tags = tagDescriptions
	var visit func(s *huma.Schema)
	seen := map[*huma.Schema]bool{}
	visit = func(s *huma.Schema) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		if s.PatternDescription != "" {
			if s.Extensions == nil {
				s.Extensions = map[string]any{}
			}
			s.Extensions["x-pattern-description"] = s.PatternDescription
			s.PatternDescription = ""
		}
		visit(s.Items)
		visit(s.Not)
		for _, p := range s.Properties {
			visit(p)
		}
		for _, list := range [][]*huma.Schema{s.OneOf, s.AnyOf, s.AllOf} {
			for _, sub := range list {
				visit(sub)
			}
		}
		if ap, ok := s.AdditionalProperties.(*huma.Schema); ok {
			visit(ap)
		}
	}
	if doc.Components != nil && doc.Components.Schemas != nil {
		for _, s := range doc.Components.Schemas.Map() {
			visit(s)
		}
	}
	for _, item := range doc.Paths {
		for _, op := range operations(item) {
			for _, p := range op.Parameters {
				visit(p.Schema)
			}
		}
	}
}

// operations are the operations of a path.
func operations(item *huma.PathItem) []*huma.Operation {
	var out []*huma.Operation
	for _, op := range []*huma.Operation{item.Get, item.Put, item.Post, item.Delete, item.Patch} {
		if op != nil {
			out = append(out, op)
		}
	}
	return out
}

// usedTags lists the tags the document's operations use.
func usedTags(doc *huma.OpenAPI) []string {
	var out []string
	for _, item := range doc.Paths {
		for _, op := range operations(item) {
			for _, t := range op.Tags {
				if !slices.Contains(out, t) {
					out = append(out, t)
				}
			}
		}
	}
	return out
}
