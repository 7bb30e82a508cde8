package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"

	"github.com/google/uuid"
)

// The operations that page by cursor (a list body's nextCursor is the
// next request's cursor, absent on the last page) each have an iterator
// here, AllXxx beside XxxWithResponse: it asks for the page at
// params.Cursor (the first when nil), yields its items in the
// operation's order, then asks for the page at nextCursor, until a page
// has none. Each page is one request, made only when the loop wants an
// item of it: a loop that breaks asks for no more. An answer that is not
// a 200 is yielded once as a *StatusError, a failed request as its
// error, and the iteration ends there; params.Limit is the page size
// asked for. params is a copy: the caller's Cursor is not moved.

// ErrCursorStuck is yielded when a page's nextCursor is the cursor that
// asked for it, which would ask for the same page forever.
var ErrCursorStuck = errors.New("page: nextCursor is the cursor of the same page")

// AllEvents is every event of ListEvents from params.Cursor on: the
// calling organizer's events, oldest first.
func (c *ClientWithResponses) AllEvents(ctx context.Context, params ListEventsParams, reqEditors ...RequestEditorFn) iter.Seq2[EventBody, error] {
	return all(ctx, &params.Cursor, func(ctx context.Context) (*http.Response, error) {
		return c.ListEvents(ctx, &params, reqEditors...)
	}, func(b ListEventsOutputBody) ([]EventBody, *string) { return b.Events, b.NextCursor })
}

// AllEventOrders is every order of ListEventOrders from params.Cursor
// on: the orders of the event eventID, newest first.
func (c *ClientWithResponses) AllEventOrders(ctx context.Context, eventID uuid.UUID, params ListEventOrdersParams, reqEditors ...RequestEditorFn) iter.Seq2[EventOrderBody, error] {
	return all(ctx, &params.Cursor, func(ctx context.Context) (*http.Response, error) {
		return c.ListEventOrders(ctx, eventID, &params, reqEditors...)
	}, func(b ListEventOrdersOutputBody) ([]EventOrderBody, *string) { return b.Orders, b.NextCursor })
}

// AllOrders is every order of ListOrders from params.Cursor on: the
// calling buyer's orders, newest first.
func (c *ClientWithResponses) AllOrders(ctx context.Context, params ListOrdersParams, reqEditors ...RequestEditorFn) iter.Seq2[OrderBody, error] {
	return all(ctx, &params.Cursor, func(ctx context.Context) (*http.Response, error) {
		return c.ListOrders(ctx, &params, reqEditors...)
	}, func(b ListOrdersOutputBody) ([]OrderBody, *string) { return b.Orders, b.NextCursor })
}

// AllWebhookEndpoints is every endpoint of ListWebhookEndpoints from
// params.Cursor on.
func (c *ClientWithResponses) AllWebhookEndpoints(ctx context.Context, params ListWebhookEndpointsParams, reqEditors ...RequestEditorFn) iter.Seq2[WebhookEndpointBody, error] {
	return all(ctx, &params.Cursor, func(ctx context.Context) (*http.Response, error) {
		return c.ListWebhookEndpoints(ctx, &params, reqEditors...)
	}, func(b ListWebhookEndpointsOutputBody) ([]WebhookEndpointBody, *string) {
		return b.Endpoints, b.NextCursor
	})
}

// AllWebhookMessages is every message of ListWebhookMessages from
// params.Cursor on, newest first.
func (c *ClientWithResponses) AllWebhookMessages(ctx context.Context, params ListWebhookMessagesParams, reqEditors ...RequestEditorFn) iter.Seq2[WebhookMessageBody, error] {
	return all(ctx, &params.Cursor, func(ctx context.Context) (*http.Response, error) {
		return c.ListWebhookMessages(ctx, &params, reqEditors...)
	}, func(b ListWebhookMessagesOutputBody) ([]WebhookMessageBody, *string) { return b.Messages, b.NextCursor })
}

// all yields the items of the pages get answers, from the one at *cursor
// on: get asks for the page at *cursor, a 200's body B is decoded as the
// operation's generated body type, and items says which of its fields
// are the page's items and its next cursor.
func all[B, T any](ctx context.Context, cursor **string, get func(context.Context) (*http.Response, error), items func(B) ([]T, *string)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		for {
			page, next, err := fetch(ctx, get, items)
			if err != nil {
				yield(zero, err)
				return
			}
			for _, it := range page {
				if !yield(it, nil) {
					return
				}
			}
			if next == nil || *next == "" {
				return
			}
			if *cursor != nil && **cursor == *next {
				yield(zero, ErrCursorStuck)
				return
			}
			*cursor = next
		}
	}
}

// fetch is one page of all: its items and next cursor, or the error of
// a request that failed or of an answer that is not a 200.
func fetch[B, T any](ctx context.Context, get func(context.Context) (*http.Response, error), items func(B) ([]T, *string)) ([]T, *string, error) {
	res, err := get(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("read page: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		return nil, nil, newStatusError(res, body)
	}
	var b B
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, nil, fmt.Errorf("decode page: %w", err)
	}
	page, next := items(b)
	return page, next, nil
}
