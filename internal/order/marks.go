package order

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"seckill/internal/idgen"
	"seckill/internal/stock"
)

// marks are the unsettled marks (stock.Layout.UnsettledKey) of this
// process's purchases answered outcome_unknown that Redis has not taken
// yet. A Redis paused or unreachable when such a purchase ends cannot take
// its mark, yet may run its take later (a command it held in its buffers):
// a take with no order and no mark, whose unit the reconciler would
// return only after the whole grace, while every buyer who found the store
// empty was told a final sold out. So the process holds each mark from the
// moment the purchase's outcome is unknown until Redis has it: meanwhile
// its own sold-out answers for the layout are not final, and it writes the
// marks again until they land, after which the reconciler's next pass
// settles their takes without the grace.
type marks struct {
	w     markWriter
	retry time.Duration // between two attempts that failed
	step  time.Duration // bounds one attempt
	log   *slog.Logger

	mu   sync.Mutex
	held map[stock.Layout]map[idgen.ID]bool
	// layouts is len(held), for holds to answer the common "none" without
	// the lock: every sold-out refusal asks.
	layouts atomic.Int64
	kick    chan struct{} // a mark is held: the writer wakes
}

// markWriter writes unsettled marks (stock.Ledgers).
type markWriter interface {
	MarkUnsettled(ctx context.Context, l stock.Layout, orders ...idgen.ID) error
}

// markRetry is how long the writer waits after an attempt that failed:
// short, since a Redis that answers again should have the marks before
// the buyers of other processes find the store empty.
const markRetry = 100 * time.Millisecond

func newMarks(w markWriter, step time.Duration, log *slog.Logger) *marks {
	return &marks{w: w, retry: markRetry, step: step, log: log,
		held: make(map[stock.Layout]map[idgen.ID]bool), kick: make(chan struct{}, 1)}
}

// mark writes the mark of order's purchase, holding it from before the
// write until Redis took it: a sold out answered here meanwhile is not
// final. A write that fails is left to the writer (run).
func (m *marks) mark(ctx context.Context, l stock.Layout, order idgen.ID) {
	m.hold(l, order)
	if err := m.w.MarkUnsettled(ctx, l, order); err != nil {
		m.log.Warn("an order of unknown outcome was not marked unsettled; the process holds the mark and writes it again until Redis takes it",
			"order", order, "error", err)
		select {
		case m.kick <- struct{}{}:
		default:
		}
		return
	}
	m.drop(l, []idgen.ID{order})
}

func (m *marks) hold(l stock.Layout, order idgen.ID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held[l] == nil {
		m.held[l] = make(map[idgen.ID]bool)
		m.layouts.Store(int64(len(m.held)))
	}
	m.held[l][order] = true
}

func (m *marks) drop(l stock.Layout, orders []idgen.ID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range orders {
		delete(m.held[l], id)
	}
	if len(m.held[l]) == 0 {
		delete(m.held, l)
		m.layouts.Store(int64(len(m.held)))
	}
}

// holds reports whether the process holds marks of the layout that Redis
// has not taken.
func (m *marks) holds(l stock.Layout) bool {
	if m.layouts.Load() == 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.held[l]) > 0
}

// snapshot is the marks held, by layout.
func (m *marks) snapshot() map[stock.Layout][]idgen.ID {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[stock.Layout][]idgen.ID, len(m.held))
	for l, ids := range m.held {
		for id := range ids {
			out[l] = append(out[l], id)
		}
	}
	return out
}

// run writes the held marks, each layout's in one round trip, until Redis
// takes them all, and then waits for the next; it returns once stop is
// closed, logging the marks it still holds (their takes wait out the
// reconciler's grace).
func (m *marks) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			m.abandon()
			return
		case <-m.kick:
		}
		for !m.flush() {
			select {
			case <-stop:
				m.abandon()
				return
			case <-time.After(m.retry):
			}
		}
	}
}

// flush writes the held marks once; it reports whether none is held.
func (m *marks) flush() bool {
	left := false
	for l, ids := range m.snapshot() {
		ctx, cancel := context.WithTimeout(context.Background(), m.step)
		err := m.w.MarkUnsettled(ctx, l, ids...)
		cancel()
		if err != nil {
			left = true
			continue
		}
		m.drop(l, ids)
		m.log.Info("unsettled marks held in process written", "product", l.ID, "orders", len(ids))
	}
	return !left
}

func (m *marks) abandon() {
	for l, ids := range m.snapshot() {
		m.log.Error("shutting down with unsettled marks Redis never took: their takes wait out the reconciler's grace",
			"product", l.ID, "orders", ids)
	}
}
