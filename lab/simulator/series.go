package simulator

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/boxoffice/boxoffice/client"
)

// Point is one second of a run. Counts are cumulative unless named as a
// rate (per second) or a gauge (at that moment); server signals are the
// last readings of GET /v1/events/{id}/onsale and are -1 when it could
// not be read.
type Point struct {
	T float64 `json:"t"` // seconds since the first buyer could arrive

	Arrived  int64 `json:"arrived"`
	Queued   int64 `json:"queued"` // gauge
	Admitted int64 `json:"admitted"`
	Holding  int64 `json:"holding"` // gauge
	Holds    int64 `json:"holds"`
	Paid     int64 `json:"paid"`
	Ticketed int64 `json:"ticketed"`
	Errors   int64 `json:"errors"`
	// RoomRequests is the waiting-room requests (joins and polls) sent
	// so far.
	RoomRequests int64 `json:"roomRequests"`

	AdmittedRate float64 `json:"admittedPerSec"`
	HoldRate     float64 `json:"holdsPerSec"`
	PaidRate     float64 `json:"paidPerSec"`
	TicketedRate float64 `json:"ticketedPerSec"`

	HoldP50 float64 `json:"holdP50Ms"` // hold requests completed in this second
	HoldP95 float64 `json:"holdP95Ms"`
	HoldP99 float64 `json:"holdP99Ms"`

	R               float64 `json:"admissionRate"`
	ControllerRate  float64 `json:"controllerRate"`
	RateReason      string  `json:"rateReason,omitempty"`
	ServerQueued    int64   `json:"serverQueued"`
	OutboxAge       float64 `json:"outboxAgeSeconds"`
	ServerHoldP99   float64 `json:"serverHoldP99Ms"`
	ActiveHolds     int64   `json:"activeHolds"`
	ConsumerPending int64   `json:"consumerPending"`

	SeatsAvailable int `json:"seatsAvailable"`
	SeatsHeld      int `json:"seatsHeld"`
	SeatsSold      int `json:"seatsSold"`
}

// Live is what the progress display shows.
type Live struct {
	Elapsed                                            time.Duration
	Buyers, Seats                                      int
	Arrived, Queued, Admitted, Holding, Paid, Ticketed int64
	Done, Errors                                       int64
	R                                                  float64
}

// Live returns the run's counts now; safe to call while Run runs.
func (s *Sim) Live() Live {
	var el time.Duration
	if !s.started.IsZero() {
		el = time.Since(s.started)
	}
	return Live{
		Elapsed: el, Buyers: s.cfg.Buyers, Seats: max(s.seatsN, s.cfg.Seats),
		Arrived: s.c.arrived.Load(), Queued: s.c.queued.Load(), Admitted: s.c.admitted.Load(),
		Holding: s.c.holding.Load(), Paid: s.c.paid.Load(), Ticketed: s.c.ticketed.Load(),
		Done: s.c.done.Load(), Errors: s.c.errors.Load(), R: math.Float64frombits(s.lastR.Load()),
	}
}

// sample appends one Point per second until ctx is done. The server's
// signals and the seat map are read by a poller of their own, so a slow
// server (the usual state of an onsale at its peak) delays readings
// rather than losing them: each Point takes the latest reading that is at
// most signalMaxAge old, and -1 when there is none.
func (s *Sim) sample(ctx context.Context) {
	var (
		mu     sync.Mutex
		latest Point // only the signal and seat fields
		readAt time.Time
	)
	go func() {
		for ctx.Err() == nil {
			start := time.Now()
			var r Point
			s.readSignals(ctx, &r)
			s.readSeats(ctx, &r)
			mu.Lock()
			latest, readAt = r, time.Now()
			mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(time.Second - time.Since(start)):
			}
		}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var prev Point
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p := Point{
			T:       time.Since(s.started).Seconds(),
			Arrived: s.c.arrived.Load(), Queued: s.c.queued.Load(), Admitted: s.c.admitted.Load(),
			Holding: s.c.holding.Load(), Holds: s.c.holds.Load(), Paid: s.c.paid.Load(),
			Ticketed: s.c.ticketed.Load(), Errors: s.c.errors.Load(), RoomRequests: s.c.room.Load(),
		}
		dt := p.T - prev.T
		if dt <= 0 {
			dt = 1
		}
		p.AdmittedRate = float64(p.Admitted-prev.Admitted) / dt
		p.HoldRate = float64(p.Holds-prev.Holds) / dt
		p.PaidRate = float64(p.Paid-prev.Paid) / dt
		p.TicketedRate = float64(p.Ticketed-prev.Ticketed) / dt
		pc := percentilesOf(s.holdRequest.drain())
		p.HoldP50, p.HoldP95, p.HoldP99 = pc.P50, pc.P95, pc.P99
		mu.Lock()
		r, age := latest, time.Since(readAt)
		mu.Unlock()
		if readAt.IsZero() || age > signalMaxAge {
			r = Point{}
			r.R, r.ControllerRate, r.ServerQueued, r.OutboxAge, r.ServerHoldP99, r.ActiveHolds, r.ConsumerPending = -1, -1, -1, -1, -1, -1, -1
			r.SeatsAvailable, r.SeatsHeld, r.SeatsSold = -1, -1, -1
		}
		p.R, p.ControllerRate, p.RateReason, p.ServerQueued = r.R, r.ControllerRate, r.RateReason, r.ServerQueued
		p.OutboxAge, p.ServerHoldP99, p.ActiveHolds, p.ConsumerPending = r.OutboxAge, r.ServerHoldP99, r.ActiveHolds, r.ConsumerPending
		p.SeatsAvailable, p.SeatsHeld, p.SeatsSold = r.SeatsAvailable, r.SeatsHeld, r.SeatsSold
		s.lastR.Store(math.Float64bits(p.R))
		s.mu.Lock()
		s.series = append(s.series, p)
		s.mu.Unlock()
		prev = p
	}
}

// signalMaxAge is how old a reading of the server's signals may be and
// still stand for the current second. At an onsale's peak on a small
// machine the simulator itself is short of CPU and reads every 10–20 s.
const signalMaxAge = 30 * time.Second

// signalTimeout bounds one read of the server's signals or seat map.
const signalTimeout = 5 * time.Second

// readSignals fills p from the organizer's onsale view of each API
// process: R and the queue summed when each process admits on its own.
func (s *Sim) readSignals(ctx context.Context, p *Point) {
	p.R, p.ControllerRate, p.ServerQueued, p.OutboxAge, p.ServerHoldP99, p.ActiveHolds, p.ConsumerPending = -1, -1, -1, -1, -1, -1, -1
	ok := false
	for i, api := range s.ops {
		if i > 0 && s.cfg.SharedWaitingRoom {
			break
		}
		rctx, cancel := context.WithTimeout(ctx, signalTimeout)
		res, err := api.GetOnsaleWithResponse(rctx, s.event, s.org)
		cancel()
		if err != nil || res.JSON200 == nil {
			continue
		}
		v := res.JSON200
		if !ok {
			p.R, p.ControllerRate, p.ServerQueued = 0, 0, 0
			ok = true
		}
		p.R += v.AdmissionRate
		p.ControllerRate += v.ControllerRate
		if v.Queued != nil {
			p.ServerQueued += *v.Queued
		}
		if p.RateReason == "" {
			p.RateReason = v.RateReason
		}
		p.OutboxAge = max(p.OutboxAge, float64(v.Signals.OutboxAgeSeconds))
		p.ServerHoldP99 = max(p.ServerHoldP99, float64(v.Signals.HoldP99Ms))
		p.ActiveHolds = max(p.ActiveHolds, v.Signals.ActiveHolds)
		p.ConsumerPending = max(p.ConsumerPending, v.Signals.ConsumerPending)
	}
}

// readSeats counts the seat map; when every seat is sold it tells buyers
// the event is sold out, as an event page would.
func (s *Sim) readSeats(ctx context.Context, p *Point) {
	rctx, cancel := context.WithTimeout(ctx, signalTimeout)
	defer cancel()
	m, _, err := s.seatMap(rctx, s.ops[0], s.org)
	if err != nil {
		p.SeatsAvailable, p.SeatsHeld, p.SeatsSold = -1, -1, -1
		return
	}
	for _, st := range m {
		switch st.Status {
		case client.SeatBodyStatusAvailable:
			p.SeatsAvailable++
		case client.SeatBodyStatusHeld:
			p.SeatsHeld++
		case client.SeatBodyStatusSold:
			p.SeatsSold++
		}
	}
	if len(m) > 0 && p.SeatsSold == len(m) {
		s.soldOut.Store(true)
	}
}
