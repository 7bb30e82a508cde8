package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/boxoffice/boxoffice/client"
	"github.com/google/uuid"
)

// StreamOrder is an order whose event stream a benchmark opens, with a
// bearer token of its owner.
type StreamOrder struct {
	ID     uuid.UUID
	Bearer string
}

// StreamsRun configures RunStreams.
type StreamsRun struct {
	// BaseURL is the API whose streams are opened.
	BaseURL string
	// PID is the API's process: its CPU is what the idle figures measure.
	PID int
	// Orders are the orders awaiting payment whose streams are opened, one
	// stream each.
	Orders []StreamOrder
	// Quiet is how long each idle window lasts: with no stream open (the
	// baseline), then with every stream open.
	Quiet time.Duration
	// Changes is how many of the orders change status, one each, at
	// ChangeRate a second, once the idle windows are over.
	Changes    int
	ChangeRate float64
	// ChangeFunc commits a status change of order with its order event;
	// when it returns, the change is committed, and that moment is the
	// start of the change's latency.
	ChangeFunc func(ctx context.Context, order uuid.UUID) error
	// Events is how many order events that change nothing a stream shows
	// (EventFunc) are committed, at ChangeRate a second, about the orders
	// of the first 100 streams, opened alone after the baseline.
	Events int
	// EventFunc commits an order event about order that changes nothing a
	// stream shows, its i-th.
	EventFunc func(ctx context.Context, order uuid.UUID, i int) error
	// TransactionsFunc is how many transactions the API process has ended
	// so far (TxCounter.Transactions of the proxy it reaches the database
	// through).
	TransactionsFunc func() int64
	// Concurrency is how many streams are being opened at once. Defaults
	// to 64.
	Concurrency int
}

// Idle is what the API process cost over an idle window.
type Idle struct {
	Window time.Duration
	// CPUPercent is the API process's CPU time (user and system) over the
	// window, in percent of one core.
	CPUPercent float64
	// TxPerSec is the database transactions the API process ended per
	// second over the window.
	TxPerSec float64
	// RSSBytes is the API process's resident memory at the end.
	RSSBytes int64
}

// StreamsResult is what RunStreams measured.
type StreamsResult struct {
	// Baseline is the API's idle cost with no stream open, Open with
	// Streams open.
	Baseline, Open Idle
	Streams        int
	// OpenTime is how long opening the streams took (but those of the
	// non-status events, opened before), to the first event of the last.
	OpenTime time.Duration
	// Events is how many non-status events were committed, and
	// EventTxPerEvent what each cost the API in database transactions:
	// those over the events' window and the settle window after it (12 s),
	// less the baseline's in as long.
	Events          int
	EventTxPerEvent float64
	// Changed is how many status changes were committed, Arrived how many
	// of them reached their stream within 10 s.
	Changed, Arrived int
	// P50, P99 and Max are the times from a change's commit to its status
	// event arriving on the client.
	P50, P99, Max time.Duration
}

// eventStreams is how many streams the non-status events are about.
const eventStreams = 100

// stream is one open order event stream on the client.
type stream struct {
	order StreamOrder
	// changed receives when the stream brings a status other than the
	// first one.
	changed chan time.Time
}

// RunStreams opens an event stream on every order, measures the API's idle
// cost without and with them (CPU from /proc, transactions from the
// database), then changes the status of run.Changes orders and measures
// each change's time from commit to its arrival on the stream.
func RunStreams(ctx context.Context, run StreamsRun) (StreamsResult, error) {
	if run.Concurrency <= 0 {
		run.Concurrency = 64
	}
	var res StreamsResult
	var err error
	if res.Baseline, err = measureIdle(ctx, run.PID, run.Quiet, run.TransactionsFunc); err != nil {
		return res, err
	}

	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = 0, 0, 0
	tr.DisableCompression = true
	defer tr.CloseIdleConnections()
	api, err := client.NewClient(run.BaseURL, client.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		return res, fmt.Errorf("streams: API %s: %w", run.BaseURL, err)
	}
	sctx, closeStreams := context.WithCancel(ctx)
	defer closeStreams()

	streams := make([]*stream, len(run.Orders))
	var readers sync.WaitGroup
	// open opens the streams of run.Orders[from:to] and waits for the
	// first event of each.
	open := func(from, to int) error {
		var (
			opening sync.WaitGroup
			errMu   sync.Mutex
			openErr error
		)
		sem := make(chan struct{}, run.Concurrency)
		for i := from; i < to; i++ {
			s := &stream{order: run.Orders[i], changed: make(chan time.Time, 1)}
			streams[i] = s
			sem <- struct{}{}
			opening.Add(1)
			readers.Go(func() {
				opened := false
				done := func(err error) {
					if !opened {
						opened = true
						<-sem
						if err != nil {
							errMu.Lock()
							if openErr == nil {
								openErr = err
							}
							errMu.Unlock()
						}
						opening.Done()
					}
				}
				defer done(errors.New("the stream ended before its first event"))
				follow(sctx, api, s, done)
			})
		}
		opening.Wait()
		if openErr != nil {
			closeStreams()
			readers.Wait()
			return fmt.Errorf("open streams: %w", openErr)
		}
		return nil
	}

	// The non-status events go to the first few streams, opened alone,
	// before any stream's first safety read (a minute after it opened) can
	// blur the count: what the API spends beyond its idle baseline is what
	// the events cost.
	interval := time.Duration(float64(time.Second) / max(run.ChangeRate, 0.001))
	evStreams := min(eventStreams, len(run.Orders))
	if run.Events > 0 && evStreams > 0 {
		if err := open(0, evStreams); err != nil {
			return res, err
		}
		tx0, start := run.TransactionsFunc(), time.Now()
		tick := time.NewTicker(interval)
		for i := range run.Events {
			order := streams[i%evStreams].order.ID
			if err := run.EventFunc(ctx, order, i); err != nil {
				tick.Stop()
				return res, fmt.Errorf("commit event about order %s: %w", order, err)
			}
			res.Events++
			<-tick.C
		}
		tick.Stop()
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(12 * time.Second):
		}
		spent := float64(run.TransactionsFunc()-tx0) - res.Baseline.TxPerSec*time.Since(start).Seconds()
		res.EventTxPerEvent = spent / float64(res.Events)
	} else {
		evStreams = 0
	}

	start := time.Now()
	if err := open(evStreams, len(run.Orders)); err != nil {
		return res, err
	}
	res.OpenTime = time.Since(start)
	res.Streams = len(streams)
	if res.Open, err = measureIdle(ctx, run.PID, run.Quiet, run.TransactionsFunc); err != nil {
		return res, err
	}

	n := min(run.Changes, len(streams))
	committed := make([]time.Time, n)
	tick := time.NewTicker(interval)
	for i := range n {
		order := streams[len(streams)-1-i].order.ID // not one of the events'
		if err := run.ChangeFunc(ctx, order); err != nil {
			tick.Stop()
			return res, fmt.Errorf("change order %s: %w", order, err)
		}
		committed[i] = time.Now()
		res.Changed++
		if i < n-1 {
			<-tick.C
		}
	}
	tick.Stop()
	latencies := make([]time.Duration, 0, n)
	deadline := time.After(10 * time.Second)
collect:
	for i := range n {
		select {
		case at := <-streams[len(streams)-1-i].changed:
			latencies = append(latencies, max(0, at.Sub(committed[i])))
		case <-deadline:
			break collect
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	closeStreams()
	readers.Wait()
	res.Arrived = len(latencies)
	slices.Sort(latencies)
	res.P50, res.P99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
	if len(latencies) > 0 {
		res.Max = latencies[len(latencies)-1]
	}
	return res, nil
}

// follow opens s's stream and reads it until ctx is done or the stream
// ends; opened is called once, with nil at the first status event or with
// the error that kept the stream from opening. The first status event
// that differs from the first one is timed into s.changed.
func follow(ctx context.Context, api *client.Client, s *stream, opened func(error)) {
	res, err := api.StreamOrderEvents(ctx, s.order.ID, nil, client.WithBearer(s.order.Bearer))
	if err != nil {
		opened(err)
		return
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		opened(fmt.Errorf("order %s: status %d", s.order.ID, res.StatusCode))
		return
	}
	var first string
	eachEvent(res.Body, func(event, data string) bool {
		if event != "status" {
			return true
		}
		at := time.Now()
		var st struct{ Status string }
		if err := json.Unmarshal([]byte(data), &st); err != nil {
			opened(err)
			return false
		}
		if first == "" {
			first = st.Status
			opened(nil)
			return true
		}
		if st.Status != first {
			select {
			case s.changed <- at:
			default:
			}
		}
		return true
	})
}

// measureIdle waits window and reports what process pid and its database
// transactions (transactions) did meanwhile.
func measureIdle(ctx context.Context, pid int, window time.Duration, transactions func() int64) (Idle, error) {
	cpu0, err := ProcessCPU(pid)
	if err != nil {
		return Idle{}, err
	}
	tx0 := transactions()
	start := time.Now()
	select {
	case <-ctx.Done():
		return Idle{}, ctx.Err()
	case <-time.After(window):
	}
	cpu1, err := ProcessCPU(pid)
	if err != nil {
		return Idle{}, err
	}
	tx1 := transactions()
	elapsed := time.Since(start)
	rss, err := ProcessRSS(pid)
	if err != nil {
		return Idle{}, err
	}
	return Idle{
		Window:     elapsed,
		CPUPercent: 100 * (cpu1 - cpu0).Seconds() / elapsed.Seconds(),
		TxPerSec:   float64(tx1-tx0) / elapsed.Seconds(),
		RSSBytes:   rss,
	}, nil
}

// TxCounter is a TCP proxy to PostgreSQL that counts the transactions
// its clients end: the ReadyForQuery messages the server sends with the
// status "idle" (not in a transaction), one after every statement run
// outside a transaction and after every COMMIT or ROLLBACK, less the one
// that ends each connection's startup. A statement pgx prepares (its
// first use on a connection) is one more round trip, and counted. It is exact where the server's
// statistics (pg_stat_database) lag by up to ten seconds and count every
// process. It speaks no TLS: use it with sslmode=disable.
type TxCounter struct {
	ln     net.Listener
	target string
	n      atomic.Int64
	wg     sync.WaitGroup
}

// NewTxCounter listens on a loopback port and forwards each connection to
// the PostgreSQL server at target (host:port).
func NewTxCounter(target string) (*TxCounter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &TxCounter{ln: ln, target: target}
	c.wg.Go(c.accept)
	return c, nil
}

// Addr is the address clients connect to instead of the server's.
func (c *TxCounter) Addr() string { return c.ln.Addr().String() }

// Transactions is how many transactions the proxy's clients have ended.
func (c *TxCounter) Transactions() int64 { return c.n.Load() }

// Close stops accepting connections and closes the listener; open
// connections end with their clients.
func (c *TxCounter) Close() error {
	err := c.ln.Close()
	c.wg.Wait()
	return err
}

func (c *TxCounter) accept() {
	for {
		client, err := c.ln.Accept()
		if err != nil {
			return
		}
		go c.forward(client)
	}
}

func (c *TxCounter) forward(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", c.target)
	if err != nil {
		return
	}
	defer server.Close()
	go func() {
		_, _ = io.Copy(server, client)
		_ = server.(*net.TCPConn).CloseWrite()
	}()
	// Server to client: a stream of messages, each a type byte, a length
	// that counts itself, and a body.
	rd := bufio.NewReaderSize(server, 64<<10)
	wr := bufio.NewWriterSize(client, 64<<10)
	started := false
	hdr := make([]byte, 5)
	for {
		if rd.Buffered() == 0 {
			if wr.Flush() != nil {
				return
			}
		}
		if _, err := io.ReadFull(rd, hdr); err != nil {
			_ = wr.Flush()
			return
		}
		body := int64(binary.BigEndian.Uint32(hdr[1:])) - 4
		if _, err := wr.Write(hdr); err != nil {
			return
		}
		if hdr[0] == 'Z' && body == 1 {
			status, err := rd.ReadByte()
			if err != nil || wr.WriteByte(status) != nil {
				return
			}
			if status == 'I' {
				if started {
					c.n.Add(1)
				}
				started = true
			}
			continue
		}
		if _, err := io.CopyN(wr, rd, body); err != nil {
			return
		}
	}
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, 100
// on every Linux architecture Go supports.
const userHZ = 100

// ProcessCPU is the CPU time (user and system, its threads included) that
// process pid has used so far, from /proc/<pid>/stat, to 10 ms.
func ProcessCPU(pid int) (time.Duration, error) { return statCPU(pid, 2) }

// statCPU sums the first n of the CPU fields of /proc/<pid>/stat: utime,
// stime, then cutime and cstime (the waited-for children's).
func statCPU(pid, n int) (time.Duration, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("read process stat: %w", err)
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// fields are counted after its closing one. utime is the 14th field,
	// the 12th after it.
	rest := string(raw)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 11+n {
		return 0, fmt.Errorf("process stat of %d: %d fields", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11 : 11+n] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("process stat of %d: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// ProcessRSS is process pid's resident memory, from /proc/<pid>/status.
func ProcessRSS(pid int) (int64, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("read process status: %w", err)
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("process status of %d: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("process status of %d: no VmRSS", pid)
}
