// Package payload encodes what leaves the system as JSON — API response
// bodies (huma's JSON format), cached representations, order stream
// events and webhook message bodies — so that a nil slice is [] and a
// nil map {}, never null.
//
// The contract (openapi.yaml) declares arrays as arrays, never
// [array, null]: a Go nil slice is an implementation detail ("no rows")
// that encoding/json would otherwise turn into a null no client was told
// to expect. Fixing it here, once, at encode time, guarantees it for
// every payload instead of asking every handler to remember make([]T, 0).
//
// Fields tagged omitempty or omitzero are left as they are when nil: such
// a field is absent from the payload either way.
package payload

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
)

// Encode writes v to w as one line of JSON (HTML characters unescaped, as
// huma writes JSON), nil slices and maps as [] and {}. v is never
// modified: what needs filling is copied.
func Encode(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(Fill(v)); err != nil {
		return fmt.Errorf("encode payload: %w", err)
	}
	return nil
}

// Marshal is json.Marshal of Fill(v).
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := Encode(&buf, v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Fill returns v with every nil slice and map it holds (through
// exported fields, pointers, interfaces, slices, arrays and maps, but not
// inside a type that marshals itself) replaced by an empty one. v itself
// is not modified, and is returned as it is when nothing needed filling:
// the common case costs one type-cache lookup.
func Fill(v any) any {
	if v == nil {
		return nil
	}
	rv := reflect.ValueOf(v)
	if out, changed := fill(rv); changed {
		return out.Interface()
	}
	return v
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// nilable memoizes holdsNilable per type: a pure function of the type,
// like encoding/json's own cache of encoders.
var nilable sync.Map // reflect.Type → bool

// holdsNilable reports whether a value of t may contain a slice or a map
// that fill would replace.
func holdsNilable(t reflect.Type) bool {
	if b, ok := nilable.Load(t); ok {
		return b.(bool)
	}
	b := computeNilable(t, map[reflect.Type]bool{})
	nilable.Store(t, b)
	return b
}

func computeNilable(t reflect.Type, visiting map[reflect.Type]bool) bool {
	if visiting[t] {
		return true // a recursive type: look at its values
	}
	if marshalsItself(t) {
		return false
	}
	visiting[t] = true
	defer delete(visiting, t)
	switch t.Kind() {
	case reflect.Slice:
		return t.Elem().Kind() != reflect.Uint8 // []byte is a base64 string
	case reflect.Map, reflect.Interface:
		return true
	case reflect.Pointer, reflect.Array:
		return computeNilable(t.Elem(), visiting)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if encoded(f) && computeNilable(f.Type, visiting) {
				return true
			}
		}
	}
	return false
}

// marshalsItself: encoding/json hands values of t (or *t) to their own
// MarshalJSON or MarshalText, whose output is theirs to decide.
func marshalsItself(t reflect.Type) bool {
	return t.Implements(marshalerType) || t.Implements(textMarshalerType) ||
		(t.Kind() != reflect.Pointer && (reflect.PointerTo(t).Implements(marshalerType) || reflect.PointerTo(t).Implements(textMarshalerType)))
}

// encoded: encoding/json writes f (exported, or an embedded struct whose
// exported fields are promoted — which fill cannot set, so they are not
// looked into), and its tag is not "-".
func encoded(f reflect.StructField) bool {
	return f.IsExported() && f.Tag.Get("json") != "-"
}

// omitted: a nil value of f is left out of the payload by its tag.
func omitted(f reflect.StructField) bool {
	_, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
	for o := range strings.SplitSeq(opts, ",") {
		if o == "omitempty" || o == "omitzero" {
			return true
		}
	}
	return false
}

// fillParts is fill for a value made of n parts, the elements or fields
// that part reaches, except those skip names (nil: none): each is filled,
// and on the first that changes v is copied, by clone (nil: a shallow
// copy of v, right for arrays and structs, whose parts it holds), so that
// v is never modified. It returns the copy and true, or v and false when
// no part changed.
func fillParts(v reflect.Value, n int, part func(reflect.Value, int) reflect.Value, skip func(int) bool,
	clone func() reflect.Value,
) (reflect.Value, bool) {
	var out reflect.Value
	for i := range n {
		if skip != nil && skip(i) {
			continue
		}
		e, changed := fill(part(v, i))
		if !changed {
			continue
		}
		if !out.IsValid() {
			if clone != nil {
				out = clone()
			} else {
				out = reflect.New(v.Type()).Elem()
				out.Set(v)
			}
		}
		part(out, i).Set(e)
	}
	if !out.IsValid() {
		return v, false
	}
	return out, true
}

// fill returns v with its nil slices and maps filled, and whether anything
// was: copy on write, v is never modified.
func fill(v reflect.Value) (reflect.Value, bool) {
	t := v.Type()
	if !holdsNilable(t) {
		return v, false
	}
	switch t.Kind() {
	case reflect.Slice:
		if v.IsNil() {
			return reflect.MakeSlice(t, 0, 0), true
		}
		// A copy of the header would share v's elements: copy them.
		return fillParts(v, v.Len(), reflect.Value.Index, nil, func() reflect.Value {
			out := reflect.MakeSlice(t, v.Len(), v.Len())
			reflect.Copy(out, v)
			return out
		})
	case reflect.Array:
		return fillParts(v, v.Len(), reflect.Value.Index, nil, nil)
	case reflect.Map:
		if v.IsNil() {
			return reflect.MakeMap(t), true
		}
		var out reflect.Value
		iter := v.MapRange()
		for iter.Next() {
			e, changed := fill(iter.Value())
			if !changed {
				continue
			}
			if !out.IsValid() {
				out = reflect.MakeMapWithSize(t, v.Len())
				for k, val := range v.Seq2() {
					out.SetMapIndex(k, val)
				}
			}
			out.SetMapIndex(iter.Key(), e)
		}
		return out, out.IsValid()
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return v, false
		}
		e, changed := fill(v.Elem())
		if !changed {
			return v, false
		}
		if t.Kind() == reflect.Pointer {
			p := reflect.New(t.Elem())
			p.Elem().Set(e)
			return p, true
		}
		out := reflect.New(t).Elem()
		out.Set(e)
		return out, true
	case reflect.Struct:
		return fillParts(v, t.NumField(), reflect.Value.Field, func(i int) bool {
			f, fv := t.Field(i), v.Field(i)
			return !encoded(f) || (fv.Kind() == reflect.Slice || fv.Kind() == reflect.Map) && fv.IsNil() && omitted(f)
		}, nil)
	}
	return v, false
}
