package outbox

import (
	"cmp"
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"seckill/internal/telemetry"
)

// Batch is what a Source delivered at once: the orders to write, and the
// source's own handle on the deliveries, which only it reads.
type Batch struct {
	Orders []QueuedOrder
	handle any
}

// Outcome is how a Sink wrote a batch.
type Outcome struct {
	// Written are in their rows now, or were already (a redelivery).
	Written []QueuedOrder
	// Voided found a void row under their id: the reconciler settled them
	// as never written and returned their units. They are dropped.
	Voided []QueuedOrder
	// Refused are orders the database will never take.
	Refused []Refusal
}

// Refusal is an order the database refused, and why.
type Refusal struct {
	Order  QueuedOrder
	Reason string
}

// Sink writes a batch of queued orders, each once: an order whose id is
// there already is not written again. An error means the database did not
// answer, or refused for a reason of the moment: the consumer tries again.
type Sink interface {
	Write(ctx context.Context, orders []QueuedOrder) (Outcome, error)
}

// Source is a queue the consumer reads: the Redis Streams (NewStreams) or
// RabbitMQ (NewRabbit).
type Source interface {
	// Next waits for a batch until the source's wait runs out or stop
	// closes. A batch and an error may come together: the batch was
	// delivered, and is written before the error is dealt with.
	Next(ctx context.Context, stop <-chan struct{}) (Batch, error)
	// Refuse returns a refused order's unit to the store (the streams move
	// the order to their dead letters; the broker's message goes with Ack).
	Refuse(ctx context.Context, r Refusal)
	// Ack tells the queue the batch is settled as w says: written, voided,
	// or refused (and handed to Refuse already).
	Ack(ctx context.Context, b Batch, w Outcome) error
	// Close stops reading; a batch delivered and not acknowledged goes to
	// another consumer.
	Close() error
}

// Options configure a Consumer. Every field has a working default.
type Options struct {
	// Batch is the most orders read at a time (from one stream; the
	// broker's prefetch). Default: 200.
	Batch int64
	// Block is how long a read waits for an order. It bounds how long
	// Close waits for the reading to stop. Default: 500ms.
	Block time.Duration
	// ClaimIdle is how long an order may stay delivered and unacknowledged
	// in a stream before another consumer takes it over (the service's
	// -claim-idle). It is how long the orders of a consumer that died
	// wait, so it should be short; it must outlast a live consumer's write
	// of a batch, or two consumers write the same batch (harmless: the
	// insert skips ids already there, but wasted). Default: 30s: a batch's
	// write is bounded by the Sink (10s) and the retry's backoff by
	// maxBackoff (5s), so a live consumer touches its batch again well
	// within it, while a dead one's orders wait half a minute, a fraction
	// of a sale's minutes. RabbitMQ has no use for it: a consumer that dies
	// hands its batch back with its connection.
	ClaimIdle time.Duration
	// ClaimEvery is how often the streams' consumer looks for such orders,
	// and drops the streams that hold none. Default: 5s, or ClaimIdle/2
	// when that is shorter, so that a short ClaimIdle is not outwaited.
	ClaimEvery time.Duration
	// Log receives what went wrong. Default: slog.Default().
	Log *slog.Logger
}

// Defaults of Options.
const (
	DefaultBatch      = 200
	DefaultBlock      = 500 * time.Millisecond
	DefaultClaimIdle  = 30 * time.Second
	DefaultClaimEvery = 5 * time.Second
)

func (o Options) withDefaults() Options {
	o.Batch = cmp.Or(max(o.Batch, 0), DefaultBatch)
	o.Block = cmp.Or(max(o.Block, 0), DefaultBlock)
	o.ClaimIdle = cmp.Or(max(o.ClaimIdle, 0), DefaultClaimIdle)
	o.ClaimEvery = cmp.Or(max(o.ClaimEvery, 0), min(DefaultClaimEvery, o.ClaimIdle/2))
	o.Log = cmp.Or(o.Log, slog.Default())
	return o
}

// The backoff between two tries of a batch the database did not answer:
// doubled from minBackoff up to maxBackoff, so that a database down for
// minutes gets a try every few seconds from each consumer, not a spin.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Consumer writes a queue's orders to the database: one per process and
// queue. It takes a batch from its Source, has the Sink write it in one
// go, hands the refused orders back to the source (their units return to
// the store) and acknowledges the batch. While the database does not
// answer, the batch in hand is retried with a backoff, and the purchases
// go on meanwhile (they need only Redis, and the broker).
type Consumer struct {
	src  Source
	sink Sink
	opt  Options
	name string
	stop chan struct{}
	done chan struct{}

	// retries counts the batch writes the database did not answer, and
	// that were tried again after a backoff.
	retries atomic.Int64
	// unacked counts the orders written whose acknowledgement failed.
	unacked atomic.Int64
	// batches and orders count the batches written and their orders;
	// writing is the time their writes took, retries included, in ns.
	batches, orders, writing atomic.Int64
	// refused counts the orders the database refused for the row.
	refused atomic.Int64
	// readFailures counts the reads of the queue that failed (its server
	// down or unreachable), each followed by another after Block.
	readFailures atomic.Int64
}

// NewConsumer returns a consumer of src into sink; Start runs it. name is
// the consumer's name in its queue.
func NewConsumer(name string, src Source, sink Sink, opt Options) *Consumer {
	return &Consumer{src: src, sink: sink, opt: opt.withDefaults(), name: name,
		stop: make(chan struct{}), done: make(chan struct{})}
}

// Retries is how many times a batch's write failed without an answer
// from the database and was tried again after a backoff: a bounded rate
// while the database is down, not a spin.
func (c *Consumer) Retries() int64 { return c.retries.Load() }

// Unacknowledged is how many orders the consumer wrote and could not
// acknowledge: they stay queued, and are skipped as written when they are
// delivered again.
func (c *Consumer) Unacknowledged() int64 { return c.unacked.Load() }

// ReadFailures is how many times the consumer could not read its queue
// (its Redis killed, say) and tried again after Options.Block: it reads
// for as long as its process lives, so that what a restarted server kept
// is written.
func (c *Consumer) ReadFailures() int64 { return c.readFailures.Load() }

// Batches is how many batches the consumer wrote (each in one go, or
// order by order when the database refused one).
func (c *Consumer) Batches() int64 { return c.batches.Load() }

// Orders is how many orders the batches written held.
func (c *Consumer) Orders() int64 { return c.orders.Load() }

// Refused is how many queued orders the database refused for the row:
// each went to the dead letters (or back to its queue's owner, mq), its
// unit back on sale.
func (c *Consumer) Refused() int64 { return c.refused.Load() }

// Writing is the time the batches' writes took, from the first try to
// the write that went through.
func (c *Consumer) Writing() time.Duration { return time.Duration(c.writing.Load()) }

// Name is the consumer's name in its queue.
func (c *Consumer) Name() string { return c.name }

// Start runs the consumer in a goroutine of its own until Close.
func (c *Consumer) Start() { go c.run() }

// Close stops reading, finishes the batch in hand (its write and its
// acknowledgement, or, if the database does not answer, leaves it to the
// queue: another consumer gets it), and returns.
func (c *Consumer) Close() error {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
	return nil
}

func (c *Consumer) stopped() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

func (c *Consumer) sleep(d time.Duration) { wait(c.stop, d) }

func (c *Consumer) run() {
	defer close(c.done)
	defer func() {
		if err := c.src.Close(); err != nil {
			c.opt.Log.Warn("closing the consumer's queue", "consumer", c.name, "error", err)
		}
	}()
	ctx := context.Background()
	for !c.stopped() {
		b, err := c.src.Next(ctx, c.stop)
		if (len(b.Orders) > 0 || b.handle != nil) && !c.handle(ctx, b) {
			return // unwritten, and stopping: the queue hands it on
		}
		if err != nil {
			c.readFailures.Add(1)
			c.opt.Log.Warn("the consumer cannot read its queue", "consumer", c.name, "error", err)
			c.sleep(c.opt.Block)
		}
	}
}

// handle writes a batch, retrying while the database does not answer, then
// hands its refusals back and acknowledges it. It reports false when the
// consumer stopped with the batch unwritten.
func (c *Consumer) handle(ctx context.Context, b Batch) bool {
	if len(b.Orders) == 0 { // nothing but what the source dropped itself
		c.settle(ctx, b, Outcome{})
		return true
	}
	// The batch is a trace of its own, linked to each purchase's: the
	// INSERT is its child, so one purchase's trace leads to its row.
	ctx, span := c.batchSpan(ctx, b.Orders)
	defer span.End()
	start := time.Now()
	for backoff := minBackoff; ; backoff = min(2*backoff, maxBackoff) {
		w, err := c.sink.Write(ctx, b.Orders)
		if err == nil {
			c.writing.Add(int64(time.Since(start)))
			c.orders.Add(int64(len(b.Orders)))
			c.batches.Add(1)
			c.settle(ctx, b, w)
			return true
		}
		if c.stopped() {
			c.opt.Log.WarnContext(ctx, "stopping with a batch unwritten; the queue hands it to another consumer", "orders", len(b.Orders), "error", err)
			return false
		}
		c.retries.Add(1)
		c.opt.Log.WarnContext(ctx, "the database did not take a batch; retrying", "orders", len(b.Orders), "in", backoff, "error", err)
		c.sleep(backoff)
	}
}

// batchSpan starts the span of a batch's write, linked to the purchases'
// spans that queued its orders (the traceparent each carried).
func (c *Consumer) batchSpan(ctx context.Context, qs []QueuedOrder) (context.Context, trace.Span) {
	if !telemetry.On() {
		return telemetry.Start(ctx, "outbox.batch") // the no-op: no links built
	}
	parents := make([]string, len(qs))
	for i, q := range qs {
		parents[i] = q.Trace
	}
	ctx, span := telemetry.StartLinked(ctx, "outbox.batch", parents, func(i int) []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("seckill.order_id", qs[i].Order.String())}
	})
	span.SetAttributes(attribute.String("seckill.consumer", c.name), attribute.Int("seckill.batch_size", len(qs)),
		attribute.String("seckill.mode", qs[0].Mode))
	return ctx, span
}

func (c *Consumer) settle(ctx context.Context, b Batch, w Outcome) {
	for _, q := range w.Voided {
		c.opt.Log.WarnContext(ctx, "an order came after the reconciler voided it; dropped (its unit went back then)", "order", q.Order)
	}
	for _, r := range w.Refused {
		c.opt.Log.ErrorContext(ctx, "a queued order was refused; its unit goes back on sale", "order", r.Order.Order, "reason", r.Reason)
		c.src.Refuse(ctx, r)
		c.refused.Add(1)
	}
	if err := c.src.Ack(ctx, b, w); err != nil {
		c.unacked.Add(int64(len(w.Written) + len(w.Voided)))
		// Unacknowledged, they are delivered again and skipped as
		// written: nothing is lost.
		c.opt.Log.WarnContext(ctx, "written orders not acknowledged; they will be delivered again", "error", err)
	}
}
