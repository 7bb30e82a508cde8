package handlers

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/page"
)

type pagedItem struct {
	id uuid.UUID
	at time.Time
}

func (p pagedItem) Cursor() page.Cursor { return page.Cursor{CreatedAt: p.at, ID: p.id} }

// A page names a next cursor only when it is full, and then the cursor of
// its last item; more items than the limit (a list merged from several
// cells) are cut to the limit first.
func TestListPageNamesTheNextCursorOfAFullPageOnly(t *testing.T) {
	t.Parallel()
	items := make([]pagedItem, 5)
	for i := range items {
		items[i] = pagedItem{id: uuid.New(), at: time.Unix(int64(1000+i), 0)}
	}
	body := func(p pagedItem) string { return p.id.String() }

	for _, tc := range []struct {
		name      string
		items     []pagedItem
		limit     int
		wantLen   int
		wantAfter *pagedItem
	}{
		{"short", items[:3], 4, 3, nil},
		{"full", items[:4], 4, 4, &items[3]},
		{"more than the limit", items, 3, 3, &items[2]},
		{"empty", nil, 4, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bodies, end := listPage(tc.items, tc.limit, body)
			require.Len(t, bodies, tc.wantLen)
			for i, b := range bodies {
				require.Equal(t, tc.items[i].id.String(), b, "bodies keep the items' order")
			}
			if tc.wantAfter == nil {
				require.Empty(t, end.NextCursor)
				return
			}
			c, err := page.Parse(end.NextCursor)
			require.NoError(t, err)
			require.Equal(t, tc.wantAfter.id, c.ID)
		})
	}
}

// A missing cursor is the first page; one this API did not write is the
// 422 of query.cursor; the limit defaults to 50.
func TestPageInputReadsTheCursorAndTheLimit(t *testing.T) {
	t.Parallel()
	after, limit, err := PageInput{}.read()
	require.NoError(t, err)
	require.Nil(t, after)
	require.Equal(t, 50, limit)

	want := page.Cursor{CreatedAt: time.Unix(1000, 0).UTC(), ID: uuid.New()}
	after, limit, err = PageInput{Cursor: want.String(), Limit: 7}.read()
	require.NoError(t, err)
	require.Equal(t, want.ID, after.ID)
	require.True(t, want.CreatedAt.Equal(after.CreatedAt))
	require.Equal(t, 7, limit)

	_, _, err = PageInput{Cursor: "not-a-cursor"}.read()
	var p *Problem
	require.ErrorAs(t, err, &p)
	require.Equal(t, 422, p.Status)
	require.Equal(t, "query.cursor", p.Errors[0].Location)
}
