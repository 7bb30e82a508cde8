// Package sliceutil holds the one slice helper the packages share, as
// River's package of the same name does: Map, for the lists a read turns
// from rows into the package's own type.
package sliceutil

// Map returns f of each element of s, in order, in a new slice of len(s):
// never nil, so an empty list stays a list (JSON [], not null) whatever
// the rows were.
func Map[T, R any](s []T, f func(T) R) []R {
	out := make([]R, len(s))
	for i, v := range s {
		out[i] = f(v)
	}
	return out
}
