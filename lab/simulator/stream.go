package simulator

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/boxoffice/boxoffice/client"
)

// acceptEventStream asks for the order's events as Server-Sent Events.
var acceptEventStream = client.WithHeader("Accept", "text/event-stream")

// orderEvent is one event of an order's stream that the buyer acts on:
// a status event's status, or a payment event's PaymentIntent id.
type orderEvent struct {
	status  string
	payment string
}

// orderEvents follows one order's event stream for a buyer, as a checkout
// page does from the hold on: it reconnects (with Last-Event-ID) when the
// stream drops, until the order is final, Config.FollowTimeout passes or
// close is called. The events arrive on c, which is closed when the
// following ends.
type orderEvents struct {
	c      chan orderEvent
	cancel context.CancelFunc
	done   chan struct{}
	// err is why c was closed before a final status; read it after c is
	// closed.
	err error
}

// follow starts following the buyer's order.
func (b *buyer) follow(ctx context.Context) *orderEvents {
	ctx, cancel := context.WithTimeout(ctx, b.sim.cfg.FollowTimeout)
	e := &orderEvents{c: make(chan orderEvent, 8), cancel: cancel, done: make(chan struct{})}
	go e.run(ctx, b)
	return e
}

// close stops following and waits for the stream's reader to end.
func (e *orderEvents) close() {
	e.cancel()
	<-e.done
}

// final waits for the order's final status; "" when the following ended
// first (the run ended, the follow timeout passed).
func (e *orderEvents) final(ctx context.Context) string {
	for {
		select {
		case <-ctx.Done():
			return ""
		case ev, ok := <-e.c:
			if !ok {
				return ""
			}
			if finalStatuses[ev.status] {
				return ev.status
			}
		}
	}
}

func (e *orderEvents) run(ctx context.Context, b *buyer) {
	defer close(e.done)
	defer close(e.c)
	var lastID string
	for reconnects := 0; ; reconnects++ {
		if reconnects > 0 && sleep(ctx, b.jitter(500*time.Millisecond)) != nil {
			e.err = ctx.Err()
			return
		}
		final, err := e.read(ctx, b, &lastID)
		if final {
			return
		}
		if ctx.Err() != nil {
			e.err = ctx.Err()
			return
		}
		if err != nil {
			b.sim.noteError(err)
			e.err = err
		}
	}
}

// read reads one connection of the stream, sending its events on e.c, and
// reports whether it delivered a final status. *lastID is the id of the
// last status event, sent as Last-Event-ID when reconnecting.
func (e *orderEvents) read(ctx context.Context, b *buyer, lastID *string) (bool, error) {
	var params *client.StreamOrderEventsParams
	if *lastID != "" {
		id := *lastID
		params = &client.StreamOrderEventsParams{LastEventID: &id}
	}
	res, err := b.sse.StreamOrderEvents(ctx, b.order, params, b.auth, acceptEventStream)
	if err != nil {
		return false, fmt.Errorf("GET /v1/orders/{id}/events: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b.sim.noteStatus("order-events", res.StatusCode)
		return false, nil
	}
	var id, kind, data string
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if line != "" {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				id = value
			case "event":
				kind = value
			case "data":
				data = value
			}
			continue
		}
		// A blank line ends an event.
		ev, ok := parseOrderEvent(kind, data)
		if id != "" {
			*lastID = id
		}
		id, kind, data = "", "", ""
		if !ok {
			continue
		}
		select {
		case e.c <- ev:
		case <-ctx.Done():
			return false, nil
		}
		if finalStatuses[ev.status] {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return false, fmt.Errorf("read order events: %w", err)
	}
	return false, nil
}

// parseOrderEvent decodes a status or payment event's data; ok is false for
// comments, other events and data it cannot read.
func parseOrderEvent(kind, data string) (orderEvent, bool) {
	var body struct {
		Status          string `json:"status"`
		PaymentIntentID string `json:"paymentIntentId"`
	}
	if data == "" || json.Unmarshal([]byte(data), &body) != nil {
		return orderEvent{}, false
	}
	switch {
	case kind == "payment" && body.PaymentIntentID != "":
		return orderEvent{payment: body.PaymentIntentID}, true
	case kind == "status" && body.Status != "":
		return orderEvent{status: body.Status}, true
	}
	return orderEvent{}, false
}
