package sliceutil_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"boxoffice/platform/sliceutil"
)

func TestMap(t *testing.T) {
	require.Equal(t, []string{"1", "2", "3"}, sliceutil.Map([]int{1, 2, 3}, strconv.Itoa))
	for _, in := range [][]int{nil, {}} {
		out := sliceutil.Map(in, strconv.Itoa)
		require.NotNil(t, out, "no rows is an empty list, not nil (JSON [], not null)")
		require.Empty(t, out)
	}
}
