package handlers

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"regexp"
	"strconv"
)

// This file makes the answers that no operation writes problems too: an
// unknown route, a method a route does not have, headers over the limit,
// and the protocol errors net/http answers on the connection itself.

// MaxHeaderBytes bounds a request's header block. Over it the answer is a
// 431 problem: from the middleware (headerLimit) up to the server's own
// read limit, which serve sets to MaxHeaderBytes too, and from
// ProblemListener beyond it.
const MaxHeaderBytes = 32 << 10

// writeProblemTo writes p as the whole response.
func writeProblemTo(w http.ResponseWriter, p *Problem) {
	body, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// routed answers a request no operation matches with a problem: 404 for an
// unknown path, 405 with the Allow header the mux computed for a known path
// asked with another method. Anything the mux does itself that is not an
// error (a redirect to the clean path) passes through unchanged.
func routed(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := &headerOnly{header: http.Header{}}
		mux.ServeHTTP(rec, r)
		switch rec.status {
		case http.StatusNotFound:
			writeProblemTo(w, problem(http.StatusNotFound, TypeNotFound, "No such resource."))
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", rec.header.Get("Allow"))
			writeProblemTo(w, problem(http.StatusMethodNotAllowed, TypeMethodNotAllowed, "This resource does not support the method "+strconv.Quote(r.Method)+"; Allow lists those it does."))
		default:
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.status)
		}
	})
}

// headerOnly records the status and headers of the mux's own answers,
// dropping their text/plain bodies.
type headerOnly struct {
	header http.Header
	status int
}

func (h *headerOnly) Header() http.Header         { return h.header }
func (h *headerOnly) Write(p []byte) (int, error) { return len(p), nil }
func (h *headerOnly) WriteHeader(status int)      { h.status = status }

// headerLimit answers 431 when the request's header block is larger than
// MaxHeaderBytes, counted as net/http counts it (names, values and
// separators).
func headerLimit(r *http.Request) bool {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n > MaxHeaderBytes
}

// ProblemListener wraps ln so that the errors net/http writes to the
// connection before any handler runs (431 for a header block over the
// server's MaxHeaderBytes, 400 for a request it cannot parse, 501 for an
// unsupported transfer encoding) go out as problems like every other
// error, not as text/plain. It recognises exactly net/http's own error
// writes, which have a fixed shape no handler's response shares (every
// response a handler writes carries a Date header).
func ProblemListener(ln net.Listener) net.Listener { return problemListener{ln} }

type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &problemConn{Conn: c}, nil
}

type problemConn struct{ net.Conn }

// protocolError is the shape of net/http's connection-level error answer.
var protocolError = regexp.MustCompile(`\AHTTP/1\.[01] ([45][0-9]{2}) [^\r\n]*\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n[^\r]*\z`)

func (c *problemConn) Write(p []byte) (int, error) {
	if !bytes.HasPrefix(p, []byte("HTTP/1.")) || !bytes.Contains(p, []byte("\r\nConnection: close\r\n\r\n")) {
		return c.Conn.Write(p)
	}
	m := protocolError.FindSubmatch(p)
	if m == nil {
		return c.Conn.Write(p)
	}
	status, _ := strconv.Atoi(string(m[1]))
	detail := "The request could not be read."
	if status == http.StatusRequestHeaderFieldsTooLarge {
		detail = "The request's headers are larger than " + strconv.Itoa(MaxHeaderBytes>>10) + " KiB."
	}
	pr := problem(status, typeForStatus(status), detail)
	if status == http.StatusBadRequest {
		pr.Type = TypeMalformed
	}
	body, _ := json.Marshal(pr)
	var out bytes.Buffer
	out.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n")
	out.WriteString("Content-Type: application/problem+json\r\nConnection: close\r\n")
	out.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	out.Write(body)
	if _, err := c.Conn.Write(out.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}
