package handlers

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// CORS: the API answers browsers' cross-origin requests only from the
// origins a deployment lists (Config.CORSOrigins); with none listed, as by
// default, it sends no CORS header and browsers keep their pages from
// reading its answers. Credentials travel in the Authorization header,
// never in cookies, so Access-Control-Allow-Credentials is never sent and
// a page of a listed origin still needs a token of its own; tokens never
// go in URLs.

// corsAllowHeaders are the request headers a browser page may send:
// traceparent and tracestate too, so a page traced by OpenTelemetry's
// browser SDK continues its trace into the API's (docs/tracing.md).
var corsAllowHeaders = []string{"Authorization", "Content-Type", "Idempotency-Key", "X-Admission-Token", "X-Correlation-Id", "If-None-Match", "Last-Event-ID", "X-Presale-Code",
	"traceparent", "tracestate"}

// corsExposeHeaders are the response headers a browser page may read
// besides the CORS-safelisted ones.
var corsExposeHeaders = []string{"Location", "Retry-After", "ETag", "X-Correlation-Id", "WWW-Authenticate", "RateLimit", "RateLimit-Policy", "Deprecation", "Sunset"}

// corsMaxAge is how long, in seconds, a browser may keep a preflight's
// answer.
const corsMaxAge = "600"

// ValidCORSOrigin reports whether origin is one a CORS allow-list may
// hold: an http or https scheme and a host (with a port or not), and
// nothing else — as browsers send it in Origin. "*" is not one: the list
// is of the deployment's own front ends.
func ValidCORSOrigin(origin string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" &&
		u.Path == "" && u.RawQuery == "" && u.Fragment == "" && u.User == nil && u.Scheme+"://"+u.Host == origin
}

// cors answers the CORS of Config.CORSOrigins around next: a preflight
// (OPTIONS with Access-Control-Request-Method) from a listed origin is
// answered 204 here; any other request from one gets the headers that let
// its page read the answer. Requests from other origins, and every request
// when the list is empty, pass through untouched.
func (h *Handlers) cors(next http.Handler) http.Handler {
	if len(h.cfg.CORSOrigins) == 0 {
		return next
	}
	allowHeaders := strings.Join(corsAllowHeaders, ", ")
	exposeHeaders := strings.Join(corsExposeHeaders, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Add("Vary", "Origin")
		if !slices.Contains(h.cfg.CORSOrigins, origin) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Access-Control-Allow-Origin", origin)
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			w.Header().Add("Vary", "Access-Control-Request-Method, Access-Control-Request-Headers")
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST, PATCH, DELETE")
			w.Header().Set("Access-Control-Allow-Headers", allowHeaders)
			w.Header().Set("Access-Control-Max-Age", corsMaxAge)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Access-Control-Expose-Headers", exposeHeaders)
		next.ServeHTTP(w, r)
	})
}
