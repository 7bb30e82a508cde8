package handlers

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/klauspost/compress/gzip"
	"golang.org/x/sync/singleflight"

	"boxoffice/domain/catalog"
	"boxoffice/platform/payload"
)

// The public reads (an event, its seat map) are answered as bytes encoded
// once: JSON, gzip when the client accepts it and it is worth it, a strong
// ETag of the content so that a client that has it gets 304 without a
// body, and Cache-Control as fresh as the server's own cache.

const (
	// gzipMinBytes: below this the gzip framing costs more than it saves.
	gzipMinBytes = 1024
	// maxRepresentationBytes bounds the encoded seat maps kept in memory.
	maxRepresentationBytes = 256 << 20
	// representationIdle is how long an unused encoded seat map is kept
	// when the cache is full: longer than any seat-map cache TTL.
	representationIdle = 10 * time.Second
)

// representation is one answer of a cacheable read, encoded once.
type representation struct {
	json []byte
	// gzip is json compressed, nil when not worth it.
	gzip []byte
	// tag names the content; the ETags are derived from it.
	tag string
}

func newRepresentation(v any) (*representation, error) {
	var buf bytes.Buffer
	if err := payload.Encode(&buf, v); err != nil { // as huma writes JSON
		return nil, err
	}
	return representationOf(buf.Bytes())
}

// representationOf is the representation of the JSON document raw, which
// it keeps.
func representationOf(raw []byte) (*representation, error) {
	sum := sha256.Sum256(raw)
	r := &representation{json: raw, tag: base64.RawURLEncoding.EncodeToString(sum[:18])}
	if len(raw) >= gzipMinBytes {
		// klauspost/compress, not compress/gzip: at BestSpeed it
		// compresses a 100,000-seat map (19 MB) twice as fast and a
		// little smaller; compress/gzip took 70 of the 100 ms an
		// encoding of that map cost (BenchmarkEncodeSeatMap).
		var zbuf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&zbuf, gzip.BestSpeed)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		if _, err := zw.Write(raw); err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		if err := zw.Close(); err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		r.gzip = zbuf.Bytes()
	}
	return r, nil
}

func (r *representation) size() int { return len(r.json) + len(r.gzip) }

// ReadOutput is a cacheable read: the bytes of a JSON document, gzipped
// when asked, or 304 with no body when the client's copy is current.
type ReadOutput struct {
	Status          int
	ContentType     string `header:"Content-Type" hidden:"true"`
	ContentEncoding string `header:"Content-Encoding" doc:"gzip when the request's Accept-Encoding allows it and the document is large enough to gain."`
	ETag            string `header:"ETag" doc:"Strong validator of this representation; send it as If-None-Match to get 304 while it is unchanged."`
	CacheControl    string `header:"Cache-Control"`
	Vary            string `header:"Vary"`
	Body            []byte
}

// answer is the output for a client with the given conditional and
// encoding preferences.
func (r *representation) answer(c readConditions, cacheControl string) *ReadOutput {
	out := &ReadOutput{
		Status: http.StatusOK, ContentType: "application/json",
		ETag: `"` + r.tag + `"`, CacheControl: cacheControl, Vary: "Accept-Encoding", Body: r.json,
	}
	if c.gzip && r.gzip != nil {
		out.ContentEncoding, out.ETag, out.Body = "gzip", `"`+r.tag+`-gzip"`, r.gzip
	}
	if c.ifNoneMatch != "" && r.matches(c.ifNoneMatch) {
		out.Status, out.ContentType, out.ContentEncoding, out.Body = http.StatusNotModified, "", "", nil
	}
	return out
}

// matches reports whether the If-None-Match header names this content,
// in either encoding: the weak comparison RFC 9110 §13.1.2 asks for.
func (r *representation) matches(ifNoneMatch string) bool {
	for tag := range strings.SplitSeq(ifNoneMatch, ",") {
		tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/")
		if tag == "*" || tag == `"`+r.tag+`"` || tag == `"`+r.tag+`-gzip"` {
			return true
		}
	}
	return false
}

// readConditions are what a cacheable read depends on besides the
// resource.
type readConditions struct {
	ifNoneMatch string
	gzip        bool
}

// acceptsGzip reports whether an Accept-Encoding header accepts gzip with
// a non-zero weight, by name or as *.
func acceptsGzip(header string) bool {
	star := false
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(part, ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		if coding != "gzip" && coding != "x-gzip" && coding != "*" {
			continue
		}
		accepted := true
		for p := range strings.SplitSeq(params, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				accepted = err == nil && q > 0
			}
		}
		if coding == "*" {
			star = accepted
			continue
		}
		return accepted // gzip named: its own weight decides
	}
	return star
}

// seatMapCache keeps each event's seat map encoded for as long as the
// catalog serves the same version of it, so that a map is encoded and
// compressed once per version, not once per request.
type seatMapCache struct {
	loads singleflight.Group

	mu     sync.Mutex
	maps   map[uuid.UUID]*encodedSeatMap
	bytes  int
	maxLen int
}

type encodedSeatMap struct {
	version uint64
	rep     *representation
	used    time.Time
}

func newSeatMapCache() *seatMapCache {
	return &seatMapCache{maps: map[uuid.UUID]*encodedSeatMap{}, maxLen: maxRepresentationBytes}
}

// get returns the representation of m, the seat map of eventID, encoding
// it with encode unless this version is already encoded.
func (c *seatMapCache) get(eventID uuid.UUID, m catalog.SeatMap, encode func(catalog.SeatMap) (*representation, error)) (*representation, error) {
	now := time.Now()
	c.mu.Lock()
	if e, ok := c.maps[eventID]; ok && e.version == m.Version {
		e.used = now
		c.mu.Unlock()
		return e.rep, nil
	}
	c.mu.Unlock()
	v, err, _ := c.loads.Do(eventID.String()+"/"+strconv.FormatUint(m.Version, 10), func() (any, error) {
		rep, err := encode(m)
		if err != nil {
			return nil, err
		}
		c.put(eventID, &encodedSeatMap{version: m.Version, rep: rep, used: now})
		return rep, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*representation), nil
}

func (c *seatMapCache) put(eventID uuid.UUID, e *encodedSeatMap) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.maps[eventID]; ok {
		if old.version > e.version {
			return // a newer version got here first
		}
		c.bytes -= old.rep.size()
	}
	c.maps[eventID] = e
	c.bytes += e.rep.size()
	if c.bytes <= c.maxLen {
		return
	}
	for id, old := range c.maps {
		if id != eventID && e.used.Sub(old.used) >= representationIdle {
			c.bytes -= old.rep.size()
			delete(c.maps, id)
		}
	}
	for id, old := range c.maps {
		if c.bytes <= c.maxLen {
			break
		}
		if id != eventID {
			c.bytes -= old.rep.size()
			delete(c.maps, id)
		}
	}
}
