package capacity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// DefaultAbandonedHoldShare is the share of a ticketed order's PostgreSQL
// CPU that a hold nobody pays for costs when Costs does not say
// (AbandonedHoldPostgresMs 0). The hold transaction is about an eighth of
// a ticketed order's PostgreSQL work (one of its seven writing
// transactions, 13% of its statement time in the 2026-12-01 breakdown of
// docs/performance.md); its expiry is a second one, and the PaymentIntent
// the hold already asked for is created and cancelled: a quarter.
const DefaultAbandonedHoldShare = 0.25

// Costs is what one ticketed order costs, measured by the purchase
// benchmark on one machine with every part of the purchase on it. CPU
// figures are milliseconds of CPU time per ticketed order. A zero in an
// optional field means "not measured": Plan fills it in and says so.
type Costs struct {
	// MachineCores is how many cores the machine measured on has; with
	// TicketedPerSec it checks the costs (PredictShared).
	MachineCores float64 `json:"machineCores"`
	// TicketedPerSec is the whole-purchase throughput measured on that
	// machine, every part on it.
	TicketedPerSec float64 `json:"ticketedPerSec"`
	// MachineBusyShare is the share of the machine's CPU (every core;
	// /proc/stat's busy time) that was busy while TicketedPerSec was
	// measured, 0 to 1; 0 when not measured. Below 1 the window was not
	// CPU-bound, and PredictShared is checked at the cores it kept busy.
	MachineBusyShare float64 `json:"machineBusyShare,omitempty"`
	// PostgresMsPerOrder is the PostgreSQL server's CPU per ticketed
	// order, the sandbox payment provider's own work excluded (a real
	// Stripe costs none of our database). Required.
	PostgresMsPerOrder float64 `json:"postgresMsPerOrder"`
	// ProductMsPerOrder is the CPU of the product's Go processes per
	// ticketed order: API, relay, consumers, NATS and the Go runtime.
	// Required, unless APIMsPerOrder and WorkerMsPerOrder give it.
	ProductMsPerOrder float64 `json:"productMsPerOrder"`
	// APIMsPerOrder is the API's part of ProductMsPerOrder. Optional: 0
	// is the rest of ProductMsPerOrder when WorkerMsPerOrder is known,
	// else half of it.
	APIMsPerOrder float64 `json:"apiMsPerOrder"`
	// WorkerMsPerOrder is the relay's, the consumers' and NATS's part of
	// ProductMsPerOrder. Optional, as APIMsPerOrder.
	WorkerMsPerOrder float64 `json:"workerMsPerOrder"`
	// BuyersMsPerOrder is the load generator's CPU per ticketed order:
	// only for predicting the shared machine.
	BuyersMsPerOrder float64 `json:"buyersMsPerOrder"`
	// StripeMsPerOrder is the Stripe stand-in's CPU per ticketed order
	// (its share of PostgreSQL included): only for predicting the shared
	// machine.
	StripeMsPerOrder float64 `json:"stripeMsPerOrder"`
	// AbandonedHoldPostgresMs is PostgreSQL's CPU for a hold that is never
	// paid: the hold and its expiry. Optional: 0 is
	// DefaultAbandonedHoldShare of PostgresMsPerOrder.
	AbandonedHoldPostgresMs float64 `json:"abandonedHoldPostgresMs"`
	// RoundTripsPerOrder is the database round trips of one ticketed
	// order, every role's.
	RoundTripsPerOrder float64 `json:"roundTripsPerOrder"`
	// EventsPerOrder is the events one ticketed order publishes to the
	// stream.
	EventsPerOrder float64 `json:"eventsPerOrder"`
	// EventBytesAvg is the average size of one stored event, headers
	// included.
	EventBytesAvg float64 `json:"eventBytesAvg"`
	// MeasuredAt is when the benchmark ran.
	MeasuredAt time.Time `json:"measuredAt"`
	// Source is the command line that produced these costs.
	Source string `json:"source"`
}

// Validate reports the first cost that cannot be planned with: a negative
// figure, or no PostgreSQL or product CPU per order.
func (c Costs) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"machineCores", c.MachineCores}, {"ticketedPerSec", c.TicketedPerSec}, {"machineBusyShare", c.MachineBusyShare},
		{"postgresMsPerOrder", c.PostgresMsPerOrder}, {"productMsPerOrder", c.ProductMsPerOrder},
		{"apiMsPerOrder", c.APIMsPerOrder}, {"workerMsPerOrder", c.WorkerMsPerOrder},
		{"buyersMsPerOrder", c.BuyersMsPerOrder}, {"stripeMsPerOrder", c.StripeMsPerOrder},
		{"abandonedHoldPostgresMs", c.AbandonedHoldPostgresMs}, {"roundTripsPerOrder", c.RoundTripsPerOrder},
		{"eventsPerOrder", c.EventsPerOrder}, {"eventBytesAvg", c.EventBytesAvg},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s: must not be negative", f.name)
		}
	}
	if c.PostgresMsPerOrder == 0 {
		return errors.New("postgresMsPerOrder: must be measured (more than 0)")
	}
	if c.ProductMsPerOrder == 0 && c.APIMsPerOrder+c.WorkerMsPerOrder == 0 {
		return errors.New("productMsPerOrder: must be measured (more than 0), or apiMsPerOrder and workerMsPerOrder")
	}
	return nil
}

// resolved is c with its optional figures filled in, and for each one
// filled in (by its JSON name) how.
func (c Costs) resolved() (Costs, map[string]string) {
	how := map[string]string{}
	switch {
	case c.ProductMsPerOrder == 0:
		c.ProductMsPerOrder = c.APIMsPerOrder + c.WorkerMsPerOrder
		how["productMsPerOrder"] = "apiMsPerOrder + workerMsPerOrder"
	case c.APIMsPerOrder == 0 && c.WorkerMsPerOrder == 0:
		c.APIMsPerOrder, c.WorkerMsPerOrder = c.ProductMsPerOrder/2, c.ProductMsPerOrder/2
		how["apiMsPerOrder"] = "unknown: half of productMsPerOrder"
		how["workerMsPerOrder"] = "unknown: half of productMsPerOrder"
	case c.APIMsPerOrder == 0:
		c.APIMsPerOrder = max(0, c.ProductMsPerOrder-c.WorkerMsPerOrder)
		how["apiMsPerOrder"] = "productMsPerOrder − workerMsPerOrder"
	case c.WorkerMsPerOrder == 0:
		c.WorkerMsPerOrder = max(0, c.ProductMsPerOrder-c.APIMsPerOrder)
		how["workerMsPerOrder"] = "productMsPerOrder − apiMsPerOrder"
	}
	if c.AbandonedHoldPostgresMs == 0 {
		c.AbandonedHoldPostgresMs = DefaultAbandonedHoldShare * c.PostgresMsPerOrder
		how["abandonedHoldPostgresMs"] = fmt.Sprintf("unknown: %g × postgresMsPerOrder", DefaultAbandonedHoldShare)
	}
	return c, how
}

// Load reads the costs the purchase benchmark wrote to path. A field it
// does not know is an error: the file and this type change together.
func Load(path string) (Costs, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Costs{}, fmt.Errorf("read costs: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var c Costs
	if err := dec.Decode(&c); err != nil {
		return Costs{}, fmt.Errorf("decode costs %s: %w", path, err)
	}
	return c, nil
}

// Save writes c to path as indented JSON, replacing what was there.
func (c Costs) Save(path string) error {
	raw, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encode costs: %w", err)
	}
	if err := os.WriteFile(path, append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("write costs: %w", err)
	}
	return nil
}
