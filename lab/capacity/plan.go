package capacity

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// SharedTolerance is how far PredictShared may be from the measured
// throughput for the costs to count as checked: 25%, about what the
// benchmark's throughput moves between runs on the shared machine.
const SharedTolerance = 0.25

// Onsale is the onsale to plan for and what a cell is built from. The
// target is AdmittedPerSec or OrdersPerSec, at most one of them; with
// neither, Plan plans one cell at the R it sustains.
type Onsale struct {
	// AttemptsPerSec is the crowd's hold attempts a second. The waiting
	// room shapes them into admissions, so they need no cells; Plan
	// reports how fast its queue grows.
	AttemptsPerSec float64
	// AdmittedPerSec is the admission rate R the onsale needs, over all
	// its cells.
	AdmittedPerSec float64
	// OrdersPerSec is the successful orders a second the onsale needs,
	// over all its cells: R = OrdersPerSec ÷ PayRatio.
	OrdersPerSec float64
	// SeatsPerOrder is the average seats one order holds.
	SeatsPerOrder float64
	// PayRatio is the fraction of admitted buyers who pay; the others'
	// holds expire.
	PayRatio float64
	// HoldLifetime is how long a hold owns its seats (BOXOFFICE_HOLD_TTL).
	HoldLifetime time.Duration
	// SafetyMargin is the fraction of every CPU kept free, 0 to below 1.
	SafetyMargin float64
	// WriterCores is the cores of one cell's PostgreSQL writer.
	WriterCores float64
	// APITaskCores and WorkerTaskCores are the cores of one API task and
	// of one worker task (boxoffice relay or work).
	APITaskCores, WorkerTaskCores float64
	// MinTasks is the fewest tasks of each kind a cell runs, for
	// availability. 0 counts as 1.
	MinTasks int
	// PoolSize is each task's database pool (DATABASE_MAX_CONNS).
	PoolSize int
	// MaxConnections is the writer's max_connections.
	MaxConnections int
	// OpsConnections is the connections kept for migrations, audits,
	// monitoring and people.
	OpsConnections int
	// Retention is the stream's replay horizon (BOXOFFICE_STREAM_MAX_AGE).
	Retention time.Duration
	// StreamReplicas is the stream's replication factor
	// (BOXOFFICE_STREAM_REPLICAS).
	StreamReplicas int
}

// Validate reports the first figure of o that cannot be planned with.
func (o Onsale) Validate() error {
	switch {
	case o.AttemptsPerSec < 0, o.AdmittedPerSec < 0, o.OrdersPerSec < 0:
		return errors.New("attempts, admitted and orders per second must not be negative")
	case o.AdmittedPerSec > 0 && o.OrdersPerSec > 0:
		return errors.New("give the target as admitted buyers or as orders per second, not both")
	case o.SeatsPerOrder <= 0:
		return errors.New("seats per order must be more than 0")
	case o.PayRatio <= 0 || o.PayRatio > 1:
		return errors.New("pay ratio must be more than 0 and at most 1")
	case o.HoldLifetime < 0:
		return errors.New("hold lifetime must not be negative")
	case o.SafetyMargin < 0 || o.SafetyMargin >= 1:
		return errors.New("safety margin must be from 0 to below 1")
	case o.WriterCores <= 0, o.APITaskCores <= 0, o.WorkerTaskCores <= 0:
		return errors.New("writer, API task and worker task cores must be more than 0")
	case o.MinTasks < 0:
		return errors.New("minimum tasks must not be negative")
	case o.PoolSize < 1, o.MaxConnections < 1:
		return errors.New("pool size and max connections must be at least 1")
	case o.OpsConnections < 0:
		return errors.New("operations connections must not be negative")
	case o.Retention < 0:
		return errors.New("retention must not be negative")
	case o.StreamReplicas < 1 || o.StreamReplicas > 5:
		return fmt.Errorf("stream replicas must be from 1 to 5, not %d", o.StreamReplicas)
	}
	return nil
}

// Rates are one load on the write path, per second.
type Rates struct {
	// Admitted is buyers the waiting room admits, R.
	Admitted float64
	// Orders is successful orders: Admitted × PayRatio.
	Orders float64
	// SeatLocks is seat lock attempts: Admitted × SeatsPerOrder.
	SeatLocks float64
	// AbandonedHolds is holds that expire unpaid: Admitted × (1 − PayRatio).
	AbandonedHolds float64
}

func ratesAt(admitted float64, o Onsale) Rates {
	return Rates{
		Admitted:       admitted,
		Orders:         admitted * o.PayRatio,
		SeatLocks:      admitted * o.SeatsPerOrder,
		AbandonedHolds: admitted * (1 - o.PayRatio),
	}
}

// Tasks is the tasks of one kind a cell runs.
type Tasks struct {
	// Needed is the tasks the CPU asks for: ms per order × orders/s ÷
	// (task cores × 1000 × (1 − SafetyMargin)).
	Needed float64
	// Run is Needed rounded up, and at least MinTasks.
	Run int
}

func tasksFor(msPerOrder, orders, cores float64, o Onsale) Tasks {
	needed := msPerOrder * orders / (cores * 1000 * (1 - o.SafetyMargin))
	return Tasks{Needed: needed, Run: max(int(math.Ceil(needed)), o.MinTasks, 1)}
}

// Connections is one cell's connection budget on its writer.
type Connections struct {
	// Open is what the cell's tasks open at most, filled:
	// (API tasks + worker tasks) × PoolSize + OpsConnections.
	Open int
	// Max is the writer's max_connections.
	Max int
	// Fits is Open ≤ Max.
	Fits bool
	// MaxPoolSize is the largest PoolSize with which Open ≤ Max; 0 when
	// not even a pool of 1 fits.
	MaxPoolSize int
}

// Stream is one cell's JetStream load: its own stream (docs/cells.md).
type Stream struct {
	// EventsPerSec is Orders × EventsPerOrder.
	EventsPerSec float64
	// BytesPerSec is EventsPerSec × EventBytesAvg, one replica.
	BytesPerSec float64
	// StoredBytes is what the stream holds once the load has lasted the
	// retention window: BytesPerSec × retention seconds × replicas.
	StoredBytes float64
	// RetentionSeconds and Replicas are the window and replication
	// factor StoredBytes is for.
	RetentionSeconds float64
	Replicas         int
}

// SharedCheck sets the throughput the costs predict on the machine they
// were measured on beside the throughput measured there.
type SharedCheck struct {
	// Cores is the machine's cores; 0 when the costs do not say, and the
	// check is not made.
	Cores float64
	// Busy is the cores the measured window kept busy: Cores ×
	// Costs.MachineBusyShare, or Cores when the share was not measured.
	Busy float64
	// Predicted is PredictShared(costs, Busy): the rate the costs say
	// the busy cores do. At a busy share of 1 it is the machine's
	// CPU-bound rate; below it, the check is whether the parts' CPU
	// accounts for what the machine was busy with (an unsaturated window
	// would otherwise fail it for want of load, not for wrong costs).
	Predicted float64
	// Measured is Costs.TicketedPerSec.
	Measured float64
	// Ratio is Predicted ÷ Measured; 0 when nothing was measured.
	Ratio float64
	// Within is |Ratio − 1| ≤ SharedTolerance.
	Within bool
}

// Result is an onsale's plan. Per-cell figures are for one cell at its
// share of the target.
type Result struct {
	// Costs are the costs planned with, optional figures filled in.
	Costs Costs
	// Defaulted names (by JSON name) each cost Plan filled in, and how.
	Defaulted map[string]string
	// PostgresMsPerAdmitted is PostgreSQL's CPU per admitted buyer:
	// PayRatio × PostgresMsPerOrder + (1 − PayRatio) × AbandonedHoldPostgresMs.
	PostgresMsPerAdmitted float64
	// CellMax is one cell at the most it sustains: R = WriterCores × 1000
	// × (1 − SafetyMargin) ÷ PostgresMsPerAdmitted.
	CellMax Rates
	// Target is the whole onsale's load.
	Target Rates
	// QueuedPerSec is how fast the waiting room's queue grows:
	// AttemptsPerSec − Target.Admitted, at least 0.
	QueuedPerSec float64
	// Cells is the cells the target needs: ⌈Target.Admitted ÷
	// CellMax.Admitted⌉. One event lives in one cell, so more than one
	// means several events at once, or a bigger writer.
	Cells int
	// WriterCoresOneCell is the writer cores that carry the whole target
	// in one cell, the margin kept.
	WriterCoresOneCell float64
	// PerCell is the target spread evenly over Cells.
	PerCell Rates
	// API and Worker are each cell's tasks at PerCell.Orders.
	API, Worker Tasks
	// Connections is each cell's connection budget.
	Connections Connections
	// RoundTripsPerSec is each cell's database round trips a second:
	// PerCell.Orders × RoundTripsPerOrder.
	RoundTripsPerSec float64
	// SeatsHeldByAbandoned is the seats that holds nobody pays for keep
	// off sale at any moment in each cell: PerCell.AbandonedHolds ×
	// SeatsPerOrder × HoldLifetime seconds.
	SeatsHeldByAbandoned float64
	// Stream is each cell's stream.
	Stream Stream
	// Shared checks the costs against their own measurement.
	Shared SharedCheck
}

// Plan works out what onsale o needs with costs c. It is a pure function
// of its arguments; both must have passed Validate.
func Plan(c Costs, o Onsale) Result {
	c, defaulted := c.resolved()
	r := Result{Costs: c, Defaulted: defaulted}
	r.PostgresMsPerAdmitted = o.PayRatio*c.PostgresMsPerOrder + (1-o.PayRatio)*c.AbandonedHoldPostgresMs
	free := 1 - o.SafetyMargin
	r.CellMax = ratesAt(o.WriterCores*1000*free/r.PostgresMsPerAdmitted, o)

	target := o.AdmittedPerSec
	switch {
	case target > 0:
	case o.OrdersPerSec > 0:
		target = o.OrdersPerSec / o.PayRatio
	default:
		target = r.CellMax.Admitted
	}
	r.Target = ratesAt(target, o)
	r.QueuedPerSec = max(0, o.AttemptsPerSec-target)
	// The tiny slack keeps a target that is a cell's R to the last
	// rounding error in one cell.
	r.Cells = max(1, int(math.Ceil(target/r.CellMax.Admitted-1e-9)))
	r.WriterCoresOneCell = target * r.PostgresMsPerAdmitted / (1000 * free)
	r.PerCell = ratesAt(target/float64(r.Cells), o)

	r.API = tasksFor(c.APIMsPerOrder, r.PerCell.Orders, o.APITaskCores, o)
	r.Worker = tasksFor(c.WorkerMsPerOrder, r.PerCell.Orders, o.WorkerTaskCores, o)
	tasks := r.API.Run + r.Worker.Run
	r.Connections = Connections{
		Open:        tasks*o.PoolSize + o.OpsConnections,
		Max:         o.MaxConnections,
		MaxPoolSize: max(0, (o.MaxConnections-o.OpsConnections)/tasks),
	}
	r.Connections.Fits = r.Connections.Open <= r.Connections.Max

	r.RoundTripsPerSec = r.PerCell.Orders * c.RoundTripsPerOrder
	r.SeatsHeldByAbandoned = r.PerCell.AbandonedHolds * o.SeatsPerOrder * o.HoldLifetime.Seconds()
	events := r.PerCell.Orders * c.EventsPerOrder
	r.Stream = Stream{
		EventsPerSec:     events,
		BytesPerSec:      events * c.EventBytesAvg,
		StoredBytes:      events * c.EventBytesAvg * o.Retention.Seconds() * float64(o.StreamReplicas),
		RetentionSeconds: o.Retention.Seconds(),
		Replicas:         o.StreamReplicas,
	}

	if c.MachineCores > 0 {
		busy := c.MachineCores
		if c.MachineBusyShare > 0 {
			busy = c.MachineCores * min(c.MachineBusyShare, 1)
		}
		r.Shared = SharedCheck{Cores: c.MachineCores, Busy: busy, Predicted: PredictShared(c, busy), Measured: c.TicketedPerSec}
		if r.Shared.Measured > 0 {
			r.Shared.Ratio = r.Shared.Predicted / r.Shared.Measured
			r.Shared.Within = math.Abs(r.Shared.Ratio-1) <= SharedTolerance
		}
	}
	return r
}

// PredictShared is the ticketed orders a second of a machine whose cores
// every part of the purchase shares, as the benchmark runs it:
// cores × 1000 ÷ (PostgreSQL + product + buyers + Stripe stand-in ms per
// order). Set beside the measured TicketedPerSec it tells whether the
// costs account for the machine's whole CPU. It is 0 when the costs
// come to nothing.
func PredictShared(c Costs, cores float64) float64 {
	c, _ = c.resolved()
	ms := c.PostgresMsPerOrder + c.ProductMsPerOrder + c.BuyersMsPerOrder + c.StripeMsPerOrder
	if ms <= 0 {
		return 0
	}
	return cores * 1000 / ms
}
