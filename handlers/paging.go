package handlers

import (
	"cmp"

	"boxoffice/platform/page"
	"boxoffice/platform/sliceutil"
)

// PageInput is the page parameters of a list an organizer pages through,
// the same on each: the cursor of the previous page and the page's size.
type PageInput struct {
	Cursor string `query:"cursor" maxLength:"200" doc:"nextCursor of the previous page."`
	Limit  int    `query:"limit" minimum:"1" maximum:"100" default:"50"`
}

// read returns where the page starts (nil: at the first item) and how
// many items it holds, or the 422 of a malformed cursor.
func (p PageInput) read() (after *page.Cursor, limit int, err error) {
	after, err = parseCursor(p.Cursor)
	return after, cmp.Or(p.Limit, 50), err
}

// PageOutput ends a page of a list.
type PageOutput struct {
	NextCursor string `json:"nextCursor,omitempty" doc:"Present when there may be more."`
}

// listPage is a page of at most limit of items as the API shows them: the
// body of each, and the cursor of the last when the page is full, for
// there may be more (none when it is not).
func listPage[T interface{ Cursor() page.Cursor }, B any](items []T, limit int, body func(T) B) ([]B, PageOutput) {
	items = items[:max(min(len(items), limit), 0)]
	bodies := sliceutil.Map(items, body)
	var end PageOutput
	if n := len(items); n > 0 && n == limit {
		end.NextCursor = items[n-1].Cursor().String()
	}
	return bodies, end
}

// parseCursor reads a cursor query parameter: nil when there is none, the
// 422 of query.cursor when it is not a cursor this API wrote.
func parseCursor(s string) (*page.Cursor, error) {
	if s == "" {
		return nil, nil //nolint:nilnil // no cursor: the first page
	}
	c, err := page.Parse(s)
	if err != nil {
		return nil, invalid("query.cursor", "malformed cursor")
	}
	return &c, nil
}
