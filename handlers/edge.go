package handlers

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
)

// This file makes the answers that no operation writes problems too:
// headers over the limit, and the protocol errors net/http answers on the
// connection itself. (An unknown route or a method a route does not have:
// statusRecorder.)

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

// CloseWrite lets net/http half-close the connection after an error
// answer, as it does on a bare TCP connection, so the client reads the
// answer before the connection closes.
func (c *problemConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// protocolErrorHeaders is what follows the status line of net/http's
// connection-level error answer, and of no handler's response.
const protocolErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// protocolStatus is the status of p when p is net/http's connection-level
// error answer, else 0. It looks at the status line and the headers that
// follow it only, so a response costs a few byte compares.
func protocolStatus(p []byte) int {
	// "HTTP/1.x NNN reason" + protocolErrorHeaders + text
	if len(p) < 13 || !bytes.HasPrefix(p, []byte("HTTP/1.")) || (p[9] != '4' && p[9] != '5') {
		return 0
	}
	end := bytes.IndexByte(p[:min(len(p), 128)], '\r')
	if end < 0 || !bytes.HasPrefix(p[end:], []byte(protocolErrorHeaders)) {
		return 0
	}
	status, err := strconv.Atoi(string(p[9:12]))
	if err != nil {
		return 0
	}
	return status
}

func (c *problemConn) Write(p []byte) (int, error) {
	status := protocolStatus(p)
	if status == 0 {
		return c.Conn.Write(p)
	}
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
