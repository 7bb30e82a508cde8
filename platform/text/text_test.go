package text_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"boxoffice/platform/text"
)

func TestStorable(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly ten", 11, "exactly ten"},
		{"cut here please", 7, "cut her"},
		{"é" + "é", 3, "é"}, // never half a rune
		{"a\x00b", 10, "ab"},
		{"bad \xff byte", 20, "bad \uFFFD byte"},
		{strings.Repeat("€", 10), 4, "€"},
	} {
		got := text.Storable(c.in, c.n)
		require.Equal(t, c.want, got, "%q cut to %d", c.in, c.n)
		require.True(t, utf8.ValidString(got))
		require.LessOrEqual(t, len(got), c.n)
	}
}

func FuzzStorable(f *testing.F) {
	f.Add("hello\x00\xff€", 5)
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n < 0 || n > 1<<16 {
			return
		}
		got := text.Storable(s, n)
		if !utf8.ValidString(got) || strings.ContainsRune(got, 0) || len(got) > n {
			t.Fatalf("Storable(%q, %d) = %q", s, n, got)
		}
	})
}
