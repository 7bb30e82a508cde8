// Package cells routes work to purchase cells (docs/design/cells.md): each cell is
// one PostgreSQL writer with its own outbox, relay, workers and bus
// namespace, and every event, order and payment lives in exactly one cell
// for its whole life. One API process can serve several cells; a Router
// tells it which.
//
// The directory is the cells themselves: an event's (order's, organizer's,
// payment intent's) cell is the one whose database holds it. The Router
// asks every cell at once on first sight and remembers the answer forever,
// since records never move. So there is no directory database to lose: a
// cell that is down makes its own records unavailable (ErrUnavailable) and
// nothing else; records of the cells that answer are found as before.
//
// New organizers are placed by rendezvous hashing of their id over the
// shared cells' names, or in the dedicated cell that names them
// (Cell.Organizers: a stadium onsale's organizer gets a writer that serves
// nobody else); an organizer stays in the cell that first stored it, and
// its events and webhook endpoints live there too, so an organizer's
// reports and webhooks never need another cell. Nothing joins across
// databases: anything that must see several cells reads their events on
// the bus.
//
// It owns no table: it only reads which cell holds an id (the directory
// queries), and writes nothing.
package cells

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"boxoffice/domain/catalog"
	"boxoffice/domain/payments"
	"boxoffice/domain/payments/sandbox"
	"boxoffice/domain/purchase"
	"boxoffice/domain/tickets"
	"boxoffice/domain/waitingroom"
	"boxoffice/domain/waitlist"
	"boxoffice/domain/webhooks"
	"boxoffice/platform/apikey"
	"boxoffice/platform/bus"
	"boxoffice/platform/fault"
	"boxoffice/platform/orderfeed"
	"boxoffice/sqlcgen"
)

// Default is the name of the cell of a single-cell deployment.
const Default = "default"

// ErrNotFound is returned when no cell holds the record and every cell
// answered.
var ErrNotFound = fault.New(fault.CodeNotFound, "cells: not found in any cell")

// ErrUnavailable is returned when no cell that answered holds the record
// but some cell did not answer: the record may be in it. Errors wrapping
// it name the cells.
var ErrUnavailable = fault.New(fault.CodeUnavailable, "cells: a purchase cell is unavailable")

// Cell is one purchase cell as an API process sees it: its database and
// the services bound to it. Fields other than Name and Pool may be nil
// when the process does not use them.
type Cell struct {
	// Name is the cell's name (bus.ValidCellName); admission tokens carry
	// it.
	Name string
	// Pool is the cell's database. Nothing of this cell is ever written
	// anywhere else.
	Pool     *pgxpool.Pool
	Catalog  *catalog.Catalog
	Purchase *purchase.Service
	// Room is the cell's waiting room; its release controller reads this
	// cell's signals only.
	Room *waitingroom.Room
	// Webhooks serves the webhook endpoints of the organizers in the cell.
	Webhooks *webhooks.Service
	// Ingress applies the payment provider's webhooks to this cell's
	// orders.
	Ingress *payments.Ingress
	// Door checks this cell's tickets in (nil without a ticket signing
	// key).
	Door *tickets.Door
	// Sandbox is the cell's sandbox payment provider (nil with Stripe).
	Sandbox *sandbox.Sandbox
	// APIKeys keeps the API keys of the organizers in the cell (nil: the
	// process serves no API keys).
	APIKeys *apikey.Store
	// Waitlist is the waitlist of the cell's sold-out events.
	Waitlist *waitlist.Service
	// Orders hands this process's order event streams the events of the
	// cell's orders, from which they show each change (nil: the streams
	// read their order on a schedule).
	Orders *orderfeed.Feed
	// Organizers, when not empty, dedicate the cell to these organizers:
	// each of them not yet stored in any cell is placed here (with all its
	// events, orders and webhook endpoints), and no other new organizer
	// ever is. Organizers already stored stay where they are.
	Organizers []uuid.UUID
}

// Bus is the cell's namespace on the bus.
func (c *Cell) Bus() bus.Namespace { return bus.ForCell(c.Name) }

// Router finds the cell of a record. It is safe for concurrent use.
type Router struct {
	cells  []*Cell
	byName map[string]*Cell
	q      *sqlcgen.Queries

	mu         sync.RWMutex
	events     map[uuid.UUID]*Cell
	orders     map[uuid.UUID]*Cell
	organizers map[uuid.UUID]*Cell
	intents    map[string]*Cell

	// dedicated maps each organizer a dedicated cell names to it; shared
	// are the cells that are not dedicated, over which Home hashes every
	// other organizer.
	dedicated map[uuid.UUID]*Cell
	shared    []*Cell
}

// maxRemembered bounds each of the Router's caches; when one is full it
// starts afresh (a forgotten record is found again by asking the cells).
const maxRemembered = 1 << 20

// probeTimeout bounds asking the cells where a record is, so a cell that
// hangs rather than refuses makes a lookup unavailable, not stuck.
const probeTimeout = 3 * time.Second

// NewRouter returns a Router over cells, which must have distinct, valid
// names and a Pool each.
func NewRouter(cells ...*Cell) (*Router, error) {
	if len(cells) == 0 {
		return nil, errors.New("cells: at least one cell is required")
	}
	r := &Router{
		byName: make(map[string]*Cell, len(cells)), q: sqlcgen.New(),
		events: map[uuid.UUID]*Cell{}, orders: map[uuid.UUID]*Cell{},
		organizers: map[uuid.UUID]*Cell{}, intents: map[string]*Cell{},
		dedicated: map[uuid.UUID]*Cell{},
	}
	for _, c := range cells {
		switch {
		case !bus.ValidCellName(c.Name):
			return nil, fmt.Errorf("cells: %q is not a valid cell name (1–32 of a-z, 0-9, _ and -)", c.Name)
		case r.byName[c.Name] != nil:
			return nil, fmt.Errorf("cells: cell %q is listed twice", c.Name)
		case c.Pool == nil:
			return nil, fmt.Errorf("cells: cell %q has no database", c.Name)
		}
		r.byName[c.Name] = c
		r.cells = append(r.cells, c)
		if len(c.Organizers) == 0 {
			r.shared = append(r.shared, c)
		}
		for _, id := range c.Organizers {
			if other := r.dedicated[id]; other != nil && other != c {
				return nil, fmt.Errorf("cells: organizer %s is dedicated to cells %q and %q", id, other.Name, c.Name)
			}
			r.dedicated[id] = c
		}
	}
	if len(r.shared) == 0 {
		return nil, errors.New("cells: every cell is dedicated to organizers; at least one must take the others")
	}
	return r, nil
}

// Single returns the Router of a one-cell process: every record is in c,
// and nothing is asked. c.Pool may be nil.
func Single(c *Cell) *Router {
	return &Router{cells: []*Cell{c}, byName: map[string]*Cell{c.Name: c}}
}

// Cells returns every cell, in configuration order.
func (r *Router) Cells() []*Cell { return slices.Clone(r.cells) }

// Cell returns the cell named name.
func (r *Router) Cell(name string) (*Cell, bool) {
	c, ok := r.byName[name]
	return c, ok
}

// ForEvent returns the cell that holds the event.
func (r *Router) ForEvent(ctx context.Context, id uuid.UUID) (*Cell, error) {
	return find(ctx, r, r.events, id, r.q.DirectoryHasEvent)
}

// ForOrder returns the cell that holds the order.
func (r *Router) ForOrder(ctx context.Context, id uuid.UUID) (*Cell, error) {
	return find(ctx, r, r.orders, id, r.q.DirectoryHasOrder)
}

// ForIntent returns the cell whose sandbox provider created the payment
// intent.
func (r *Router) ForIntent(ctx context.Context, id string) (*Cell, error) {
	return find(ctx, r, r.intents, id, r.q.DirectoryHasIntent)
}

// ForOrganizer returns the organizer's cell: the one that holds it, or for
// a new organizer (no cell holds it and every cell answered) its
// rendezvous-hash cell, where its first write will store it. An organizer
// whose cell may be down gets ErrUnavailable rather than a second home.
func (r *Router) ForOrganizer(ctx context.Context, id uuid.UUID) (*Cell, error) {
	c, err := find(ctx, r, r.organizers, id, r.q.DirectoryHasOrganizer)
	if errors.Is(err, ErrNotFound) {
		return r.Home(id), nil
	}
	return c, err
}

// Home is the cell a new organizer is placed in: the dedicated cell that
// names it (Cell.Organizers), else, of every cell not dedicated, the one
// with the highest hash of (cell name, organizer id). Adding a cell moves
// only the new organizers that now hash to it, or that it names; existing
// organizers stay where they are stored.
func (r *Router) Home(organizerID uuid.UUID) *Cell {
	if c := r.dedicated[organizerID]; c != nil {
		return c
	}
	shared := r.shared
	if shared == nil { // Single
		shared = r.cells
	}
	var best *Cell
	var bestScore uint64
	for _, c := range shared {
		h := sha256.New()
		h.Write([]byte(c.Name))
		h.Write(organizerID[:])
		score := binary.BigEndian.Uint64(h.Sum(nil))
		if best == nil || score > bestScore {
			best, bestScore = c, score
		}
	}
	return best
}

// Remember records that the event lives in cell, as the process that just
// created it knows.
func (r *Router) Remember(eventID uuid.UUID, c *Cell) { remember(r, r.events, eventID, c) }

// RememberOrder records that the order lives in cell, as the process that
// just created it knows.
func (r *Router) RememberOrder(orderID uuid.UUID, c *Cell) { remember(r, r.orders, orderID, c) }

func remember[K comparable](r *Router, m map[K]*Cell, key K, c *Cell) {
	if len(r.cells) == 1 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(m) >= maxRemembered {
		clear(m)
	}
	m[key] = c
}

// find returns the cell that holds key: the remembered one, else the one
// cell that says it holds it, asking every cell at once.
func find[K comparable](ctx context.Context, r *Router, m map[K]*Cell, key K,
	has func(context.Context, sqlcgen.DBTX, K) (bool, error),
) (*Cell, error) {
	if len(r.cells) == 1 {
		return r.cells[0], nil
	}
	r.mu.RLock()
	c, ok := m[key]
	r.mu.RUnlock()
	if ok {
		return c, nil
	}
	type answer struct {
		cell *Cell
		has  bool
		err  error
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	answers := make(chan answer, len(r.cells))
	for _, c := range r.cells {
		go func() {
			ok, err := has(ctx, c.Pool, key)
			answers <- answer{c, ok, err}
		}()
	}
	var down []string
	var downErr error
	for range r.cells {
		a := <-answers
		switch {
		case a.err != nil:
			down = append(down, a.cell.Name)
			downErr = a.err
		case a.has:
			remember(r, m, key, a.cell)
			return a.cell, nil
		}
	}
	if len(down) > 0 {
		slices.Sort(down)
		return nil, fmt.Errorf("%w: %v did not answer: %w", ErrUnavailable, down, downErr)
	}
	return nil, ErrNotFound
}
