package handlers

import (
	"context"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"
)

// register is huma.Register for every operation of this API. After huma has
// parsed and validated the input against its schema, and before the handler
// runs, it checks the input once more with the rules no JSON Schema keyword
// states (checkInput), the same way for every input struct. A handler never
// sees text that PostgreSQL would refuse.
func register[I, O any](api huma.API, op huma.Operation, handler func(context.Context, *I) (*O, error)) {
	if op.Security == nil {
		// Public, and saying so: an empty requirement list, not a missing one.
		op.Security = []map[string][]string{}
	}
	plan := inputPlanFor(reflect.TypeFor[I]())
	huma.Register(api, op, func(ctx context.Context, in *I) (*O, error) {
		if errs := plan.check(reflect.ValueOf(in).Elem()); len(errs) > 0 {
			return nil, newError(http.StatusUnprocessableEntity, "Validation failed.", errs...)
		}
		return handler(ctx, in)
	})
}

// The rules checkInput applies, each stated once:
//
//   - Every string of the input (path, query and header parameters, and
//     every string anywhere in the body, map keys included) is UTF-8 with no
//     NUL character: PostgreSQL stores neither invalid UTF-8 nor NUL in
//     text, so such input is the client's mistake (422; 400 for a header).
//   - A string field tagged `trim:"true"` loses its leading and trailing
//     white space before the handler sees it. Its schema states, with a
//     pattern, that it must not be blank, so "   " fails validation
//     instead of reaching a length check in the database.
//   - A slice field tagged `unique:"true"` holds distinct items. This is
//     JSON Schema's uniqueItems, checked here on the typed items: huma's
//     own check hashes the untyped items and panics on an object or array.
const (
	msgText   = "expected UTF-8 text without NUL characters"
	msgUnique = "expected array items to be unique"
	// maxTextErrors bounds the details one problem lists.
	maxTextErrors = 8
)

// inputPlan is what checkInput does for one input type, worked out once.
type inputPlan struct {
	fields []planField
}

type planField struct {
	index  []int
	loc    string // "path.eventId", "header.Idempotency-Key", "body"
	trim   bool
	unique bool
}

var inputPlans sync.Map // reflect.Type → *inputPlan

func inputPlanFor(t reflect.Type) *inputPlan {
	if p, ok := inputPlans.Load(t); ok {
		return p.(*inputPlan)
	}
	p := &inputPlan{}
	p.add(t, nil)
	inputPlans.Store(t, p)
	return p
}

// add plans the parameters and body of the input struct t, found at index
// (an embedded struct's fields are the input's own, as for huma).
func (p *inputPlan) add(t reflect.Type, index []int) {
	for i := range t.NumField() {
		f := t.Field(i)
		at := append(slices.Clone(index), i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			p.add(f.Type, at)
			continue
		}
		if !f.IsExported() {
			continue
		}
		var loc string
		switch {
		case f.Tag.Get("path") != "":
			loc = "path." + f.Tag.Get("path")
		case f.Tag.Get("query") != "":
			loc = "query." + strings.Split(f.Tag.Get("query"), ",")[0]
		case f.Tag.Get("header") != "":
			loc = "header." + f.Tag.Get("header")
		case f.Name == "Body" || f.Name == "RawBody":
			loc = "body"
		default:
			continue
		}
		p.fields = append(p.fields, planField{index: at, loc: loc, trim: f.Tag.Get("trim") == "true", unique: f.Tag.Get("unique") == "true"})
	}
}

func (p *inputPlan) check(in reflect.Value) []error {
	c := &textChecker{}
	for _, f := range p.fields {
		v := in.FieldByIndex(f.index)
		if f.loc == "body" && v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			continue // a raw body ([]byte) is the operation's own to parse
		}
		c.walk(v, f.loc, f.trim, f.unique)
		if len(c.errs) >= maxTextErrors {
			break
		}
	}
	return c.errs
}

type textChecker struct {
	errs []error
}

func (c *textChecker) fail(loc, msg string) {
	if len(c.errs) < maxTextErrors {
		c.errs = append(c.errs, &huma.ErrorDetail{Location: loc, Message: msg})
	}
}

// walk checks v, found at loc, and everything inside it.
func (c *textChecker) walk(v reflect.Value, loc string, trim, unique bool) {
	if len(c.errs) >= maxTextErrors {
		return
	}
	switch v.Kind() {
	case reflect.String:
		s := v.String()
		if !validText(s) {
			c.fail(loc, msgText)
			return
		}
		if trim && v.CanSet() {
			v.SetString(strings.TrimSpace(s))
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			c.walk(v.Elem(), loc, trim, unique)
		}
	case reflect.Struct:
		t := v.Type()
		if !hasText(t) {
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
				continue
			case name == "":
				name = f.Name
			}
			c.walk(v.Field(i), loc+"."+name, f.Tag.Get("trim") == "true", f.Tag.Get("unique") == "true")
		}
	case reflect.Slice, reflect.Array:
		if unique && v.Type().Elem().Comparable() {
			seen := make(map[any]struct{}, v.Len())
			for i := range v.Len() {
				item := v.Index(i).Interface()
				if _, dup := seen[item]; dup {
					c.fail(loc+"["+strconv.Itoa(i)+"]", msgUnique)
					break
				}
				seen[item] = struct{}{}
			}
		}
		if !hasText(v.Type().Elem()) {
			return
		}
		for i := range v.Len() {
			c.walk(v.Index(i), loc+"["+strconv.Itoa(i)+"]", trim, false)
		}
	case reflect.Map:
		if !hasText(v.Type().Key()) && !hasText(v.Type().Elem()) {
			return
		}
		iter := v.MapRange()
		for iter.Next() {
			k := iter.Key()
			if k.Kind() == reflect.String && !validText(k.String()) {
				c.fail(loc, msgText)
				continue
			}
			c.walk(iter.Value(), loc+"."+k.String(), false, false)
		}
	}
}

// validText reports whether PostgreSQL can store s as text.
func validText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

var textTypes sync.Map // reflect.Type → bool

// hasText reports whether a value of type t can hold a string somewhere,
// or a field tagged unique, so that walks skip what has nothing to check
// (a list of UUIDs, say) at no cost.
func hasText(t reflect.Type) bool {
	if v, ok := textTypes.Load(t); ok {
		return v.(bool)
	}
	textTypes.Store(t, false) // a recursive type is judged by its other fields
	var has bool
	switch t.Kind() {
	case reflect.String, reflect.Interface:
		has = true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		has = hasText(t.Elem())
	case reflect.Map:
		has = hasText(t.Key()) || hasText(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if f.IsExported() && (hasText(f.Type) || f.Tag.Get("unique") == "true") {
				has = true
				break
			}
		}
	}
	textTypes.Store(t, has)
	return has
}
