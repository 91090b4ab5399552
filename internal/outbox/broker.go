// Package outbox carries the orders answered before their rows are
// written, from the purchase to the consumer that writes them, on either
// of two queues: the async mode's Redis Streams (the take script appends
// the order in its own step: stock.Queue) and the mq mode's RabbitMQ
// queue (Broker). Both are read by one consumer loop (Consumer) over a
// Source, the shape of watermill's subscriber: a batch delivered, written
// by a Sink, its refusals handed back, then acknowledged.
//
// The mq mode's broker is RabbitMQ through amqp091-go. Orders are
// published to one durable quorum queue per deployment, with publisher
// confirms, so that a publish returns once the broker has the message (a
// quorum queue confirms once a majority of its replicas wrote it). A
// consumer takes them in batches and acknowledges each batch once it is
// written. The queue's depth, read by a passive declare, tells the
// reconciler whether a take's order may still be in the queue.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"seckill/internal/telemetry"
)

// Outcomes a caller branches on.
var (
	// ErrNotSent: the message was not handed to the broker (no connection,
	// or the broker refused it with a nack): it is not in the queue.
	ErrNotSent = errors.New("mq: not published")
	// ErrUnconfirmed: the message was sent and no confirmation came back
	// (the connection broke, or the wait ran out): it may be in the queue.
	ErrUnconfirmed = errors.New("mq: publish not confirmed")
	// ErrClosed: the broker handle or the subscription was closed.
	ErrClosed = errors.New("mq: closed")
)

// DialTimeout bounds connecting to the broker.
const DialTimeout = 5 * time.Second

// Broker is one connection to RabbitMQ, a channel in confirm mode for the
// publishes, and the queue the orders go to. It reconnects on the next
// publish after the connection broke. Safe for concurrent use.
type Broker struct {
	url, queue string

	mu     sync.Mutex
	conn   *amqp.Connection
	pub    *amqp.Channel
	closed bool
}

// Dial connects to the broker at url and declares the queue: durable,
// quorum. The queue outlives the connection: orders published and not yet
// written wait in it for a consumer.
func Dial(url, queue string) (*Broker, error) {
	b := &Broker{url: url, queue: queue}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.connect(); err != nil {
		return nil, err
	}
	return b, nil
}

// Queue is the name of the broker's queue.
func (b *Broker) Queue() string { return b.queue }

// connect opens the connection and the publishing channel, and declares
// the queue; b.mu is held.
func (b *Broker) connect() error {
	conn, err := amqp.DialConfig(b.url, amqp.Config{Dial: amqp.DefaultDial(DialTimeout)})
	if err != nil {
		return fmt.Errorf("connecting to RabbitMQ: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		_, err = ch.QueueDeclare(b.queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
	}
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return fmt.Errorf("declaring the queue %s: %w", b.queue, err)
	}
	b.conn, b.pub = conn, ch
	return nil
}

// channel returns the publishing channel, connecting again if it closed.
func (b *Broker) channel() (*amqp.Channel, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if b.pub != nil && !b.pub.IsClosed() {
		return b.pub, nil
	}
	if b.conn != nil {
		b.conn.Close()
	}
	if err := b.connect(); err != nil {
		return nil, err
	}
	return b.pub, nil
}

// Publish sends body to the queue, persistent, and waits for the broker's
// confirmation until ctx ends. It returns nil once the broker has the
// message, ErrNotSent when it surely does not, and ErrUnconfirmed when it
// may.
func (b *Broker) Publish(ctx context.Context, id string, body []byte) error {
	ch, err := b.channel()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	var headers amqp.Table // the publisher's trace context, when traced
	if tp := telemetry.TraceParent(ctx); tp != "" {
		headers = amqp.Table{"traceparent": tp}
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", b.queue, false, false, amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: id, Body: body, Headers: headers,
	})
	if err != nil {
		// A frame may have left before the error: only a publish refused
		// before it began is surely not in the queue.
		if errors.Is(err, amqp.ErrClosed) || ctx.Err() != nil {
			return fmt.Errorf("%w: publishing %s: %w", ErrNotSent, id, err)
		}
		return fmt.Errorf("%w: publishing %s: %w", ErrUnconfirmed, id, err)
	}
	acked, err := dc.WaitContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("%w: publishing %s: %w", ErrUnconfirmed, id, err)
	case acked:
		return nil
	case ch.IsClosed():
		// The channel closed before the confirmation: a nack is what the
		// library reports then, and the broker may have the message.
		return fmt.Errorf("%w: publishing %s: the channel closed", ErrUnconfirmed, id)
	}
	return fmt.Errorf("%w: the broker refused %s (nack)", ErrNotSent, id)
}

// Depth returns the messages in the queue not yet delivered to a consumer,
// by a passive declare on a channel of its own (a failed passive declare
// closes its channel).
func (b *Broker) Depth(ctx context.Context) (int, error) {
	b.mu.Lock()
	conn := b.conn
	b.mu.Unlock()
	if conn == nil || conn.IsClosed() {
		if _, err := b.channel(); err != nil {
			return 0, err
		}
		b.mu.Lock()
		conn = b.conn
		b.mu.Unlock()
	}
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("opening a channel to read the depth of %s: %w", b.queue, err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(b.queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
	if err != nil {
		return 0, fmt.Errorf("reading the depth of %s: %w", b.queue, err)
	}
	return q.Messages, nil
}

// Delete deletes the queue, messages and all: for tests that made one of
// their own.
func (b *Broker) Delete() error {
	ch, err := b.channel()
	if err != nil {
		return err
	}
	if _, err := ch.QueueDelete(b.queue, false, false, false); err != nil {
		return fmt.Errorf("deleting the queue %s: %w", b.queue, err)
	}
	return nil
}

// Close closes the connection; the queue and its messages stay.
func (b *Broker) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.conn == nil {
		return nil
	}
	if err := b.conn.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("closing the RabbitMQ connection: %w", err)
	}
	return nil
}

// Subscription is a consumer of the queue on a connection of its own, so
// that closing it hands its unacknowledged messages back to the queue
// without touching the publishes.
type Subscription struct {
	conn       *amqp.Connection
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
}

// Delivery is one message handed to a subscription.
type Delivery = amqp.Delivery

// Subscribe starts consuming the queue, with at most prefetch messages
// delivered and not acknowledged at a time.
func (b *Broker) Subscribe(prefetch int) (*Subscription, error) {
	conn, err := amqp.DialConfig(b.url, amqp.Config{Dial: amqp.DefaultDial(DialTimeout)})
	if err != nil {
		return nil, fmt.Errorf("connecting to RabbitMQ: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(prefetch, 0, false)
	}
	var ds <-chan amqp.Delivery
	if err == nil {
		ds, err = ch.Consume(b.queue, "", false, false, false, false, nil)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("consuming %s: %w", b.queue, err)
	}
	return &Subscription{conn: conn, ch: ch, deliveries: ds}, nil
}

// Next returns up to n deliveries: it waits up to wait (or until stop is
// closed) for the first, then takes what has already arrived. It returns
// ErrClosed once the subscription's channel is gone.
func (s *Subscription) Next(stop <-chan struct{}, n int, wait time.Duration) ([]Delivery, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	var out []Delivery
	select {
	case d, ok := <-s.deliveries:
		if !ok {
			return nil, ErrClosed
		}
		out = append(out, d)
	case <-t.C:
		return nil, nil
	case <-stop:
		return nil, nil
	}
	for len(out) < n {
		select {
		case d, ok := <-s.deliveries:
			if !ok {
				return out, nil
			}
			out = append(out, d)
		default:
			return out, nil
		}
	}
	return out, nil
}

// Ack acknowledges ds, which came from one Next: all of them at once.
func (s *Subscription) Ack(ds []Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	if err := s.ch.Ack(ds[len(ds)-1].DeliveryTag, true); err != nil {
		return fmt.Errorf("acknowledging %d messages: %w", len(ds), err)
	}
	return nil
}

// Close stops consuming; the messages delivered and not acknowledged go
// back to the queue for another consumer.
func (s *Subscription) Close() error {
	if err := s.conn.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("closing the subscription: %w", err)
	}
	return nil
}
