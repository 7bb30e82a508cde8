// Package text holds what every writer of free text into the database
// needs: text that PostgreSQL's text type accepts (valid UTF-8, no NUL)
// and that stays within its bound.
package text

import (
	"strings"
	"unicode/utf8"
)

// Storable returns s cut to at most n bytes, with invalid UTF-8 replaced
// by U+FFFD and NUL bytes removed, never splitting a rune: what a receiver
// answered or an error said, fit for a text column. s is attacker- or
// peer-controlled in general; the result is safe to store and to log.
func Storable(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return strings.ReplaceAll(s, "\x00", "")
}
