package outbox

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"seckill/internal/idgen"
	"seckill/internal/stock"
)

// fakeSource hands out its batches in turn, each with its error, and
// records what the consumer did with them.
type fakeSource struct {
	mu      sync.Mutex
	batches []Batch
	errs    []error
	refused []Refusal
	acked   [][]idgen.ID
	closed  bool
}

func (f *fakeSource) Next(_ context.Context, stop <-chan struct{}) (Batch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.batches) == 0 {
		f.mu.Unlock()
		wait(stop, time.Millisecond)
		f.mu.Lock()
		return Batch{}, nil
	}
	b, err := f.batches[0], f.errs[0]
	f.batches, f.errs = f.batches[1:], f.errs[1:]
	return b, err
}

func (f *fakeSource) Refuse(_ context.Context, r Refusal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refused = append(f.refused, r)
}

func (f *fakeSource) Ack(_ context.Context, _ Batch, w Outcome) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []idgen.ID
	for _, q := range append(w.Written, w.Voided...) {
		ids = append(ids, q.Order)
	}
	f.acked = append(f.acked, ids)
	return nil
}

func (f *fakeSource) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func (f *fakeSource) snapshot() (acked [][]idgen.ID, refused []Refusal, closed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.acked), slices.Clone(f.refused), f.closed
}

// fakeSink fails its first failures writes, then writes every order but
// id 2 (voided) and id 3 (refused).
type fakeSink struct {
	mu       sync.Mutex
	failures int
	writes   int
}

func (s *fakeSink) Write(_ context.Context, qs []QueuedOrder) (Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	if s.failures > 0 {
		s.failures--
		return Outcome{}, errors.New("the database did not answer")
	}
	var w Outcome
	for _, q := range qs {
		switch q.Order {
		case 2:
			w.Voided = append(w.Voided, q)
		case 3:
			w.Refused = append(w.Refused, Refusal{Order: q, Reason: "refused"})
		default:
			w.Written = append(w.Written, q)
		}
	}
	return w, nil
}

func orders(ids ...idgen.ID) []QueuedOrder {
	qs := make([]QueuedOrder, len(ids))
	for i, id := range ids {
		qs[i] = QueuedOrder{Entry: stock.Entry{Order: id}}
	}
	return qs
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// The one loop both queues run: a batch is written (tried again while the
// database does not answer), its refusals handed back, and then it is
// acknowledged, written and voided alike; a batch delivered with an error
// is written all the same.
func TestConsumerWritesRefusesAndAcknowledges(t *testing.T) {
	src := &fakeSource{
		batches: []Batch{{Orders: orders(1, 2, 3)}, {Orders: orders(4)}},
		errs:    []error{nil, errors.New("one stream's node failed")},
	}
	sink := &fakeSink{failures: 2}
	c := NewConsumer("test", src, sink, Options{Block: time.Millisecond, Log: quiet})
	c.Start()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if acked, _, _ := src.snapshot(); len(acked) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	acked, refused, closed := src.snapshot()
	if want := [][]idgen.ID{{1, 2}, {4}}; !slices.EqualFunc(acked, want, slices.Equal) {
		t.Errorf("acknowledged %v, want %v (written and voided, batch by batch)", acked, want)
	}
	if len(refused) != 1 || refused[0].Order.Order != 3 {
		t.Errorf("refused %v, want order 3 handed back", refused)
	}
	if c.Retries() != 2 {
		t.Errorf("retries = %d, want 2 (the two writes the database did not answer)", c.Retries())
	}
	if c.Batches() != 2 || c.Orders() != 4 || c.Writing() <= 0 {
		t.Errorf("counted %d batches of %d orders written in %v; want 2 of 4, in some time", c.Batches(), c.Orders(), c.Writing())
	}
	if !closed {
		t.Error("the source was not closed")
	}
}

// A consumer told to stop while the database does not answer leaves the
// batch unacknowledged, for the queue to hand to another consumer.
func TestConsumerStopsWithTheBatchUnwritten(t *testing.T) {
	src := &fakeSource{batches: []Batch{{Orders: orders(1)}}, errs: []error{nil}}
	sink := &fakeSink{failures: 1 << 30}
	c := NewConsumer("test", src, sink, Options{Block: time.Millisecond, Log: quiet})
	c.Start()
	for c.Retries() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	acked, refused, closed := src.snapshot()
	if len(acked) != 0 || len(refused) != 0 || !closed {
		t.Errorf("acked %v, refused %v, closed %v: want nothing settled and the source closed", acked, refused, closed)
	}
}
