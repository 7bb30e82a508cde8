package handlers

import (
	"reflect"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"boxoffice/domain/webhooks"
)

// declareWebhooks writes the document's webhooks section (OpenAPI 3.1):
// one entry per message type the dispatcher sends, generated from
// webhooks.MessageTypes — the registry whose Go types the fan-out encodes
// each message's data from — so that the contract and what is sent have
// one source. Each entry is the POST an organizer's endpoint receives: the
// Standard Webhooks headers, the body (type, timestamp, data), and what
// the endpoint's answer means. docs/webhooks.md says how to receive them.
func declareWebhooks(api huma.API) {
	doc := api.OpenAPI()
	reg := doc.Components.Schemas
	header := func(name, desc, pattern string) *huma.Param {
		return &huma.Param{Name: name, In: "header", Required: true, Description: desc,
			Schema: &huma.Schema{Type: huma.TypeString, Pattern: pattern}}
	}
	params := []*huma.Param{
		header("webhook-id", "The message's id, msg_<uuid>: the same on every attempt and every replay of the message. "+
			"Deduplicate by it (keep the ids you have processed for at least the message retention, 30 days by default: "+
			"an organizer may replay any retained message).", `^msg_[0-9a-f-]{36}$`),
		header("webhook-timestamp", "When this attempt was signed, in Unix seconds. Refuse a message more than 5 minutes "+
			"from your clock (a replayed capture).", `^[0-9]+$`),
		header("webhook-signature", "Space-separated signatures v1,<base64 HMAC-SHA256 of \"{webhook-id}.{webhook-timestamp}.{body}\" "+
			"under the endpoint's secret>; during a secret rotation's overlap, one per secret. Verify against the raw body "+
			"before parsing it.", `^v1,[A-Za-z0-9+/=]+( v1,[A-Za-z0-9+/=]+)*$`),
	}
	responses := map[string]*huma.Response{
		"200": {Description: "Any 2xx acknowledges the message: answer only after your own commit of its effect, " +
			"within 15 seconds. Other answers are retried (408, 429, 5xx, timeouts, connection errors; a Retry-After " +
			"pushes the next attempt back, by up to a day) on the schedule at once, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h; " +
			"redirects and other 4xx end the delivery."},
		"410": {Description: "Gone: the endpoint is disabled at once and receives nothing more until its organizer enables it " +
			"again (its other endpoints subscribed to endpoint.disabled are told)."},
	}
	if doc.Webhooks == nil {
		doc.Webhooks = map[string]*huma.PathItem{}
	}
	for _, mt := range webhooks.MessageTypes {
		data := reg.Schema(reflect.TypeOf(mt.Data), true, "")
		// Version 1 under the type's name, as since the first release;
		// version 2 (camelCase) under v2:<type>, its data the same
		// schemas with every property renamed (webhooks.CamelCase).
		for _, v := range []struct {
			key, id, summary, note string
			data                   *huma.Schema
		}{
			{mt.Name, "webhook-" + mt.Name, mt.Name, " Payload version 1 (snake_case), the default.", data},
			{"v2:" + mt.Name, "webhook-v2-" + mt.Name, mt.Name + " (payload version 2)",
				" Payload version 2: the same fields in camelCase, sent to endpoints created or updated with payloadVersion 2.",
				camelSchema(reg, data)},
		} {
			body := &huma.Schema{
				Type:        huma.TypeObject,
				Description: "A " + mt.Name + " message: " + mt.Description,
				Required:    []string{"type", "timestamp", "data"},
				Properties: map[string]*huma.Schema{
					"type":      {Type: huma.TypeString, Enum: []any{mt.Name}, Description: "The message type."},
					"timestamp": {Type: huma.TypeString, Format: "date-time", Description: "When the fact happened (not when it was sent: order messages may arrive out of order)."},
					"data":      v.data,
				},
			}
			doc.Webhooks[v.key] = &huma.PathItem{Post: &huma.Operation{
				OperationID: v.id,
				Summary:     v.summary,
				Description: mt.Description + " Sent as a Standard Webhooks message to your endpoint's URL; see docs/webhooks.md." + v.note,
				Tags:        []string{"Webhook messages"},
				Security:    []map[string][]string{},
				Parameters:  params,
				RequestBody: &huma.RequestBody{Required: true, Content: map[string]*huma.MediaType{
					"application/json": {Schema: body},
				}},
				Responses: responses,
			}}
		}
	}
}

// camelSchema is s in payload version 2: a copy whose object properties,
// at every depth, are renamed by webhooks.CamelCase. A reference to a
// component becomes a reference to its version-2 twin, <name>V2, made
// once.
func camelSchema(reg huma.Registry, s *huma.Schema) *huma.Schema {
	if s == nil {
		return nil
	}
	if s.Ref != "" {
		name := strings.TrimPrefix(s.Ref, "#/components/schemas/")
		twin := name + "V2"
		if _, ok := reg.Map()[twin]; !ok {
			reg.Map()[twin] = &huma.Schema{} // a cycle meets the twin, not a new one
			*reg.Map()[twin] = *camelSchema(reg, reg.SchemaFromRef(s.Ref))
		}
		c := *s
		c.Ref = "#/components/schemas/" + twin
		return &c
	}
	c := *s
	if s.Properties != nil {
		c.Properties = make(map[string]*huma.Schema, len(s.Properties))
		for k, p := range s.Properties {
			c.Properties[webhooks.CamelCase(k)] = camelSchema(reg, p)
		}
	}
	if s.Required != nil {
		c.Required = make([]string, len(s.Required))
		for i, k := range s.Required {
			c.Required[i] = webhooks.CamelCase(k)
		}
	}
	c.Items = camelSchema(reg, s.Items)
	for _, list := range []*[]*huma.Schema{&c.OneOf, &c.AnyOf, &c.AllOf} {
		if *list != nil {
			out := make([]*huma.Schema, len(*list))
			for i, x := range *list {
				out[i] = camelSchema(reg, x)
			}
			*list = out
		}
	}
	return &c
}
