package simulator

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/boxoffice/boxoffice/client"
)

// Result is what a run produced: its settings, the per-second series and
// the summary. The caller may add Chaos and Audit before writing the
// report.
type Result struct {
	EventID  string        `json:"eventId"`
	Buyers   int           `json:"buyers"`
	Seats    int           `json:"seats"`
	Arrival  string        `json:"arrival"`
	Window   time.Duration `json:"arrivalWindow"`
	PayRatio float64       `json:"payRatio"`
	Started  time.Time     `json:"started"`
	// BuyersDone is when the last buyer finished; Elapsed includes the
	// wait for walked-away holds to expire.
	BuyersDone time.Duration `json:"buyersDone"`
	Elapsed    time.Duration `json:"elapsed"`
	Series     []Point       `json:"series"`
	Summary    Summary       `json:"summary"`
	// Chaos lists the processes killed and restarted, if any.
	Chaos []ChaosEvent `json:"chaos,omitempty"`
	// Audit is the invariant audit's report; AuditOK its verdict. Empty
	// when no audit ran.
	Audit   string `json:"audit,omitempty"`
	AuditOK *bool  `json:"auditOk,omitempty"`
	// CPU is what each part of the run used of the machine, when the
	// caller measured it (NewCPUReport).
	CPU *CPUReport `json:"cpu,omitempty"`
}

// Summary is the run's outcome.
type Summary struct {
	// Sold is the number of distinct seats buyers received tickets for.
	Sold int `json:"sold"`
	// Oversold counts tickets for a seat somebody else also got, plus
	// seats sold beyond the event's size. It must be 0.
	Oversold int `json:"oversold"`
	// SeatMapSold is what the final seat map shows as sold.
	SeatMapSold int `json:"seatMapSold"`
	// Buyers by outcome.
	Ticketed  int64 `json:"ticketed"`
	Declined  int64 `json:"declined"`
	Abandoned int64 `json:"abandoned"`
	// AbandonedEnded is how many abandoned orders ended (hold expired)
	// before the run finished waiting for them.
	AbandonedEnded int64 `json:"abandonedEnded"`
	Failed         int64 `json:"failed"`
	SoldOut        int64 `json:"soldOut"`
	GaveUp         int64 `json:"gaveUp"`
	Errored        int64 `json:"errored"`

	Admitted  int64 `json:"admitted"`
	Holds     int64 `json:"holds"`
	Conflicts int64 `json:"conflicts"`
	// BestAvailableHolds are the holds of buyers who asked for the best
	// available seats (of Holds).
	BestAvailableHolds int64            `json:"best_available_holds"`
	HoldRetries        int64            `json:"holdRetries"`
	Errors             int64            `json:"errors"`
	ErrorKinds         map[string]int   `json:"errorKinds,omitempty"`
	Outcomes           map[string]int64 `json:"outcomes"`

	HoldLatency Percentiles `json:"holdLatency"`
	HoldRequest Percentiles `json:"holdRequest"`
	// HoldConnWait is each hold request's wait for a connection, and
	// HoldServer the time from its last byte written to the first byte
	// of the answer: the server's part, accept and scheduling queues on
	// the machine included. The rest of HoldRequest is the client's.
	HoldConnWait Percentiles `json:"holdConnWait"`
	HoldServer   Percentiles `json:"holdServer"`
	TimeToTicket Percentiles `json:"timeToTicket"`
	IntentWait   Percentiles `json:"intentWait"`
	PayToTicket  Percentiles `json:"payToTicket"`
	QueueWait    Percentiles `json:"queueWait"`

	PeakTicketed float64 `json:"peakTicketedPerSec"`
	PeakHolds    float64 `json:"peakHoldsPerSec"`
	PeakAdmitted float64 `json:"peakAdmittedPerSec"`
	PeakR        float64 `json:"peakAdmissionRate"`
	MaxOutboxAge float64 `json:"maxOutboxAgeSeconds"`
	MaxQueued    int64   `json:"maxQueued"`
	// RoomRequests is the waiting-room requests (joins and polls) the
	// buyers sent, RoomRequestsArrivals those sent within the arrival
	// window: what the queue cost the API, beside the purchases.
	RoomRequests         int64 `json:"roomRequests"`
	RoomRequestsArrivals int64 `json:"roomRequestsArrivals"`
	// RateReasons counts the seconds R spent under each reason the release
	// controller gave for its last change (healthy, hold_p99, outbox_age, …).
	RateReasons map[string]int `json:"rateReasons,omitempty"`
}

// ChaosEvent is one process killed or restarted during a run.
type ChaosEvent struct {
	T       float64 `json:"t"` // seconds since the run started
	Process string  `json:"process"`
	Action  string  `json:"action"` // killed or restarted
}

func (s *Sim) result(ctx context.Context, buyersDone time.Duration) *Result {
	s.mu.Lock()
	series := slices.Clone(s.series)
	errKinds := maps.Clone(s.errKinds)
	perSeat := map[string]int{}
	for _, seats := range s.tickets {
		for _, id := range seats {
			perSeat[id]++
		}
	}
	s.mu.Unlock()

	sum := Summary{
		Ticketed: s.c.ticketed.Load(), Declined: s.c.declined.Load(), Abandoned: s.c.abandoned.Load(), AbandonedEnded: s.expired.Load(),
		Failed: s.c.failed.Load(), SoldOut: s.c.soldOut.Load(),
		Admitted: s.c.admitted.Load(), Holds: s.c.holds.Load(), Conflicts: s.c.conflicts.Load(),
		BestAvailableHolds: s.c.bestHolds.Load(),
		HoldRetries:        s.c.retries.Load(), Errors: s.c.errors.Load(), ErrorKinds: errKinds,
		HoldLatency: percentilesOf(s.holdLatency.snapshot()), HoldRequest: percentilesOf(s.holdRequest.snapshot()),
		HoldConnWait: percentilesOf(s.holdConn.snapshot()), HoldServer: percentilesOf(s.holdServer.snapshot()),
		TimeToTicket: percentilesOf(s.timeToTicket.snapshot()), IntentWait: percentilesOf(s.intentWait.snapshot()),
		PayToTicket: percentilesOf(s.payToTicket.snapshot()),
		QueueWait:   percentilesOf(s.queueWait.snapshot()),
	}
	sum.Sold = len(perSeat)
	for _, n := range perSeat {
		sum.Oversold += n - 1
	}
	sum.Oversold += max(0, sum.Sold-s.seatsN)
	done := s.c.done.Load()
	sum.GaveUp = s.c.gaveUp.Load()
	sum.Errored = done - sum.Ticketed - sum.Declined - sum.Abandoned - sum.Failed - sum.SoldOut - sum.GaveUp
	sum.RateReasons = map[string]int{}
	for _, p := range series {
		if p.RateReason != "" {
			sum.RateReasons[p.RateReason]++
		}
		sum.PeakTicketed = max(sum.PeakTicketed, p.TicketedRate)
		sum.PeakHolds = max(sum.PeakHolds, p.HoldRate)
		sum.PeakAdmitted = max(sum.PeakAdmitted, p.AdmittedRate)
		sum.PeakR = max(sum.PeakR, p.R)
		sum.MaxOutboxAge = max(sum.MaxOutboxAge, p.OutboxAge)
		sum.MaxQueued = max(sum.MaxQueued, p.Queued)
		if p.T <= s.cfg.Duration.Seconds() {
			sum.RoomRequestsArrivals = p.RoomRequests
		}
	}
	sum.RoomRequests = s.c.room.Load()
	if m, _, err := s.seatMap(ctx, s.apis[0], s.org); err == nil {
		for _, st := range m {
			if st.Status == client.SeatBodyStatusSold {
				sum.SeatMapSold++
			}
		}
	} else {
		sum.SeatMapSold = -1
	}
	return &Result{
		EventID: s.eventID, Buyers: s.cfg.Buyers, Seats: s.seatsN, Arrival: s.cfg.Arrival, Window: s.cfg.Duration,
		PayRatio: s.cfg.PayRatio, Started: s.started, BuyersDone: buyersDone, Elapsed: time.Since(s.started),
		Series: series, Summary: sum,
	}
}

// OK says whether the run upheld the invariants: nothing oversold, no
// more seats sold than exist, and the audit (when it ran) passed.
func (r *Result) OK() bool {
	return r.Summary.Oversold == 0 && r.Summary.Sold <= r.Seats && (r.AuditOK == nil || *r.AuditOK)
}

func ms(v float64) string {
	if v >= 10000 {
		return fmt.Sprintf("%.1fs", v/1000)
	}
	return fmt.Sprintf("%.0fms", v)
}

// String formats p for the summary: "n/a" without samples.
func (p Percentiles) String() string {
	if p.N == 0 {
		return "n/a"
	}
	return fmt.Sprintf("p50 %s  p95 %s  p99 %s  max %s  (n=%d)", ms(p.P50), ms(p.P95), ms(p.P99), ms(p.Max), p.N)
}

// WriteSummary writes the summary as plain text.
func (r *Result) WriteSummary(w io.Writer) error {
	s := r.Summary
	var b strings.Builder
	fmt.Fprintf(&b, "Onsale of event %s: %d buyers for %d seats, %s arrival over %s, pay ratio %.2f\n",
		r.EventID, r.Buyers, r.Seats, r.Arrival, r.Window, r.PayRatio)
	fmt.Fprintf(&b, "  duration          %s (last buyer done at %s)\n", r.Elapsed.Round(time.Second), r.BuyersDone.Round(time.Second))
	fmt.Fprintf(&b, "  sold              %d of %d seats (seat map shows %d sold)\n", s.Sold, r.Seats, s.SeatMapSold)
	fmt.Fprintf(&b, "  oversold          %d\n", s.Oversold)
	fmt.Fprintf(&b, "  buyers            %d ticketed, %d declined, %d abandoned (%d holds expired), %d failed, %d left sold out, %d gave up queueing, %d errored\n",
		s.Ticketed, s.Declined, s.Abandoned, s.AbandonedEnded, s.Failed, s.SoldOut, s.GaveUp, s.Errored)
	fmt.Fprintf(&b, "  admitted          %d; holds %d; seat conflicts %d; hold retries (same key) %d\n", s.Admitted, s.Holds, s.Conflicts, s.HoldRetries)
	fmt.Fprintf(&b, "  queue wait        %s\n", s.QueueWait)
	fmt.Fprintf(&b, "  hold latency      %s\n", s.HoldLatency)
	fmt.Fprintf(&b, "    each request    %s\n", s.HoldRequest)
	fmt.Fprintf(&b, "    conn wait       %s\n", s.HoldConnWait)
	fmt.Fprintf(&b, "    written → 1st byte %s\n", s.HoldServer)
	fmt.Fprintf(&b, "  time to ticket    %s\n", s.TimeToTicket)
	fmt.Fprintf(&b, "    hold → intent   %s\n", s.IntentWait)
	fmt.Fprintf(&b, "    paid → ticket   %s\n", s.PayToTicket)
	fmt.Fprintf(&b, "  peak throughput   %.0f tickets/s, %.0f holds/s, %.0f admissions/s (peak R %.0f/s)\n", s.PeakTicketed, s.PeakHolds, s.PeakAdmitted, s.PeakR)
	fmt.Fprintf(&b, "  max outbox age    %.0fs; max queued %d\n", s.MaxOutboxAge, s.MaxQueued)
	if after := r.BuyersDone - r.Window; r.Window > 0 && after > 0 {
		fmt.Fprintf(&b, "  waiting room      %d joins and polls: %.0f/s over the arrivals, %.0f/s after\n", s.RoomRequests,
			float64(s.RoomRequestsArrivals)/r.Window.Seconds(), float64(s.RoomRequests-s.RoomRequestsArrivals)/after.Seconds())
	}
	if len(s.RateReasons) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(s.RateReasons)) {
			parts = append(parts, fmt.Sprintf("%s %ds", k, s.RateReasons[k]))
		}
		fmt.Fprintf(&b, "  R's reasons       %s\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "  errors            %d", s.Errors)
	if len(s.ErrorKinds) > 0 {
		keys := slices.Sorted(maps.Keys(s.ErrorKinds))
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s: %d", k, s.ErrorKinds[k]))
		}
		fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	}
	b.WriteString("\n")
	if r.CPU != nil {
		r.CPU.write(&b)
	}
	for _, c := range r.Chaos {
		fmt.Fprintf(&b, "  chaos             %6.1fs %s %s\n", c.T, c.Process, c.Action)
	}
	if r.AuditOK != nil {
		verdict := "PASSED"
		if !*r.AuditOK {
			verdict = "FAILED"
		}
		fmt.Fprintf(&b, "  audit             %s\n", verdict)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
