package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"boxoffice/domain/cells"
	"boxoffice/platform/orderfeed"
)

// sseResponses documents an event stream's 200 response: a
// text/event-stream described by description (the response) and
// schemaDescription (its events), whose events' data are given as schemas
// in extensions, and the X-Accel-Buffering header every stream sends.
func sseResponses(description, schemaDescription string, extensions map[string]any) map[string]*huma.Response {
	return map[string]*huma.Response{"200": {
		Description: description,
		Content: map[string]*huma.MediaType{"text/event-stream": {Schema: &huma.Schema{
			Type:        huma.TypeString,
			Description: schemaDescription,
			Extensions:  extensions,
		}}},
		Headers: map[string]*huma.Param{"X-Accel-Buffering": {
			Description: "Always no: tells a proxy in front (nginx) not to buffer the stream.",
			Schema:      &huma.Schema{Type: huma.TypeString, Enum: []any{"no"}},
		}},
	}}
}

// sseStream is the response of an event stream whose opening has taken
// what release gives back (stream slots, a feed watch). huma calls its
// body once the handler returns; the body sends the event-stream headers
// and has follow write the events for at most orderEventsMaxLifetime.
// release is called when the body ends, whatever ends it, and when the
// request ends should huma never call the body (a write error before):
// it may be called twice, so it must be safe to.
func sseStream(ctx context.Context, release func(), follow func(ctx context.Context, w *sseWriter)) *huma.StreamResponse {
	stop := context.AfterFunc(ctx, release)
	return &huma.StreamResponse{Body: func(hctx huma.Context) {
		defer func() { stop(); release() }()
		hctx.SetHeader("Content-Type", "text/event-stream")
		hctx.SetHeader("Cache-Control", "no-store")
		hctx.SetHeader("X-Accel-Buffering", "no") // no proxy buffering
		hctx.SetStatus(http.StatusOK)
		w, ok := hctx.BodyWriter().(http.ResponseWriter)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(hctx.Context(), orderEventsMaxLifetime)
		defer cancel()
		follow(ctx, &sseWriter{w: w, rc: http.NewResponseController(w)})
	}}
}

// sseWriter writes an event stream. What it writes goes to the client
// when the stream next waits (followFeed flushes it before it waits for
// its feed or reads) or ends (the response's end sends it with its last
// chunk): the events of one wake, and the last event and the end of the
// stream, go in one write to the connection instead of one each. The
// writes must be done within orderEventsWriteTimeout where the writer
// supports a deadline.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	// pending is whether something was written since the last flush.
	pending bool
}

// write writes chunk, to be flushed. It reports false when the client
// cannot be written to: the stream is over.
func (s *sseWriter) write(chunk []byte) bool {
	_ = s.rc.SetWriteDeadline(time.Now().Add(orderEventsWriteTimeout)) // unsupported by some writers; best effort
	if _, err := s.w.Write(chunk); err != nil {
		return false
	}
	s.pending = true
	return true
}

// flush sends what was written since the last flush. It reports false
// when the client cannot be written to: the stream is over.
func (s *sseWriter) flush() bool {
	if !s.pending {
		return true
	}
	s.pending = false
	_ = s.rc.SetWriteDeadline(time.Now().Add(orderEventsWriteTimeout))
	return s.rc.Flush() == nil
}

// event writes an event named name whose data is v as JSON, with id as
// its id unless id is empty. It reports false when v does not marshal or
// the write fails.
func (s *sseWriter) event(id, name string, v any) bool {
	data, err := json.Marshal(v)
	if err != nil {
		return false
	}
	var chunk []byte
	if id != "" {
		chunk = append(chunk, "id: "+id+"\n"...)
	}
	chunk = append(chunk, "event: "+name+"\ndata: "...)
	chunk = append(chunk, data...)
	return s.write(append(chunk, "\n\n"...))
}

// feedFollower is what a stream following one aggregate on a cell's feed
// does in followFeed's loop.
type feedFollower struct {
	// watch delivers the aggregate's events; nil without a feed, when
	// only the timed reads follow it.
	watch *orderfeed.Watcher
	// firstRead is how long after the loop starts the first read comes
	// should nothing wake the stream before.
	firstRead time.Duration
	// woken is given what watch delivered (missed: it may have lost
	// some) and reports whether to read the aggregate now; ok false ends
	// the stream.
	woken func(events []orderfeed.Event, missed bool) (read, ok bool)
	// read reads the aggregate and writes what changed; it calls
	// schedule, before or after its read as its rule needs, with how
	// long until the next read should nothing wake the stream. It
	// reports false to end the stream.
	read func(ctx context.Context, schedule func(time.Duration)) bool
}

// followFeed is the loop of an event stream that follows an aggregate on
// a cell's feed: until ctx ends or f ends the stream, it writes a
// heartbeat comment every orderEventsHeartbeat (the process's streams
// share one clock), hands what the watch delivers to f.woken, and has
// f.read read when woken says so or when the read timer that f.read
// schedules fires. What the stream writes before the loop (its opening
// events) is its own.
func (h *Handlers) followFeed(ctx context.Context, w *sseWriter, f feedFollower) {
	var wake <-chan struct{}
	if f.watch != nil {
		wake = f.watch.C
	}
	read := time.NewTimer(f.firstRead)
	defer read.Stop()
	heartbeat, stopHeartbeat := h.heartbeats.add()
	defer stopHeartbeat()
	schedule := func(d time.Duration) { read.Reset(d) }
	for {
		if !w.flush() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			if !w.write([]byte(": keep-alive\n\n")) {
				return
			}
			continue
		case <-wake:
			now, ok := f.woken(f.watch.Take())
			if !ok {
				return
			}
			if !now {
				continue
			}
		case <-read.C:
		}
		// What woken wrote goes out before the read waits on the
		// database.
		if !w.flush() || !f.read(ctx, schedule) {
			return
		}
	}
}

// streamOpening is what an event stream's opening has taken: stream
// slots and the feed watch. Should the stream never start (a 4xx, a
// 429), the opening's deferred abandon gives them back; once it starts,
// start hands their release to the stream (sseStream).
type streamOpening struct {
	watch   *orderfeed.Watcher
	slots   []func()
	started bool
}

// openStream starts the opening of one of userID's event streams: it
// takes one of the buyer's stream slots first, before anything reaches
// the database, or answers 429 with tooMany as its detail. The caller
// defers the opening's abandon.
func (h *Handlers) openStream(userID uuid.UUID, tooMany string) (*streamOpening, error) {
	release, ok := h.limits.streams.acquireUser(userID)
	if !ok {
		return nil, rateLimited(tooMany, streamRetryAfter)
	}
	return &streamOpening{slots: []func(){release}}, nil
}

// slot keeps a stream slot's release.
func (o *streamOpening) slot(release func()) { o.slots = append(o.slots, release) }

// watchOn watches id on c's feed and returns the watcher; nil when c has
// no feed.
func (o *streamOpening) watchOn(c *cells.Cell, id uuid.UUID) *orderfeed.Watcher {
	if c.Orders != nil {
		o.watch = c.Orders.Watch(id)
	}
	return o.watch
}

// release stops the watch, then gives the slots back, last taken first.
func (o *streamOpening) release() {
	if o.watch != nil {
		o.watch.Stop()
	}
	for i := len(o.slots) - 1; i >= 0; i-- {
		o.slots[i]()
	}
}

// abandon releases what the opening took unless the stream started.
func (o *streamOpening) abandon() {
	if !o.started {
		o.release()
	}
}

// start marks the stream started and returns the release of what its
// opening took, for sseStream.
func (o *streamOpening) start() func() {
	o.started = true
	return o.release
}
