package client

import (
	"context"
	"net/http"
)

// WithBearer sends token as "Authorization: Bearer token": pass it to
// one call, or to NewClient with WithRequestEditorFn for every call.
func WithBearer(token string) RequestEditorFn {
	v := "Bearer " + token
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", v)
		return nil
	}
}

// WithHeader sets the request header key to value, replacing what the
// generated code set (so it may carry a header the operation does not
// document, such as Accept-Encoding).
func WithHeader(key, value string) RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set(key, value)
		return nil
	}
}
