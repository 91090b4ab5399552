package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"seckill/internal/api"
	"seckill/internal/idgen"
	"seckill/internal/stock"
)

// message is an order on its way through the broker.
type message struct {
	ID      string `json:"id"`
	Product int64  `json:"product"`
	Epoch   int64  `json:"epoch"`
	Sale    int64  `json:"sale"`
	User    int64  `json:"user"`
	Shard   int    `json:"shard"`
	Key     string `json:"key"`
	At      int64  `json:"at"`            // when the unit was taken, Unix ms
	Due     int64  `json:"due,omitempty"` // when the payment window ends, Unix ms
}

// PublishOrder publishes q's order (see Publish for what its error says).
func (b *Broker) PublishOrder(ctx context.Context, q QueuedOrder) error {
	m := message{ID: q.Order.String(), Product: q.Layout.ID, Epoch: q.Layout.Epoch, Sale: q.Sale, User: q.User,
		Shard: q.Shard, Key: q.Key, At: q.At.UnixMilli()}
	if q.Due != nil {
		m.Due = q.Due.UnixMilli()
	}
	body, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("%w: encoding order %s: %w", ErrNotSent, q.Order, err)
	}
	return b.Publish(ctx, m.ID, body)
}

// parseMessage reads an order from the broker.
func parseMessage(body []byte) (QueuedOrder, error) {
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		return QueuedOrder{}, fmt.Errorf("malformed order message %q: %w", body, err)
	}
	id, err := idgen.ParseID(m.ID)
	if err != nil || id == 0 || m.User <= 0 || m.Product <= 0 {
		return QueuedOrder{}, fmt.Errorf("malformed order message %q", body)
	}
	e := stock.Entry{User: m.User, Order: id, Key: m.Key, Shard: m.Shard, At: time.UnixMilli(m.At), MQ: true}
	q := QueuedOrder{Entry: e, Layout: stock.Layout{ID: m.Product, Epoch: m.Epoch}, Sale: m.Sale, Mode: api.ModeMQ}
	if m.Due > 0 {
		d := time.UnixMilli(m.Due)
		q.Due = &d
	}
	return q, nil
}

// rabbit is the mq mode's queue: the broker's, read on a subscription of
// its own connection, so that a consumer that dies or stops hands its
// unacknowledged batch back to the queue. A malformed message is dropped;
// a refused order's unit goes back to the store, its message acknowledged.
type rabbit struct {
	b        *Broker
	opt      Options
	giveBack func(ctx context.Context, q QueuedOrder, reason string)
	log      *slog.Logger
	sub      *Subscription // nil until subscribed, and after it broke
}

// NewRabbit returns the Source of the broker's queue. giveBack returns the
// unit of an order the database refused.
func NewRabbit(b *Broker, giveBack func(ctx context.Context, q QueuedOrder, reason string), opt Options) Source {
	opt = opt.withDefaults()
	return &rabbit{b: b, opt: opt, giveBack: giveBack, log: opt.Log}
}

func (r *rabbit) Next(_ context.Context, stop <-chan struct{}) (Batch, error) {
	if r.sub == nil {
		sub, err := r.b.Subscribe(int(r.opt.Batch))
		if err != nil {
			return Batch{}, fmt.Errorf("subscribing to %s; trying again: %w", r.b.Queue(), err)
		}
		r.sub = sub
	}
	ds, err := r.sub.Next(stop, int(r.opt.Batch), r.opt.Block)
	if err != nil {
		r.drop()
		return Batch{}, fmt.Errorf("the subscription to %s broke; subscribing again: %w", r.b.Queue(), err)
	}
	if len(ds) == 0 {
		return Batch{}, nil
	}
	b := Batch{handle: delivered{r.sub, ds}}
	for _, d := range ds {
		q, err := parseMessage(d.Body)
		if err != nil {
			r.log.Error("dropping a malformed order message", "queue", r.b.Queue(), "error", err)
			continue
		}
		q.Trace, _ = d.Headers["traceparent"].(string)
		b.Orders = append(b.Orders, q)
	}
	return b, nil
}

func (r *rabbit) Refuse(ctx context.Context, x Refusal) { r.giveBack(ctx, x.Order, x.Reason) }

// Ack acknowledges the whole batch: written, voided, refused (its unit
// given back) and malformed alike. A failed one drops the subscription:
// its batch is delivered again, and skipped as written.
func (r *rabbit) Ack(_ context.Context, b Batch, _ Outcome) error {
	d := b.handle.(delivered)
	if err := d.sub.Ack(d.ds); err != nil {
		r.drop()
		return err
	}
	return nil
}

// delivered is a batch's deliveries and the subscription they came on,
// the only one that can acknowledge them.
type delivered struct {
	sub *Subscription
	ds  []Delivery
}

func (r *rabbit) Close() error {
	r.drop()
	return nil
}

// drop closes the subscription; the next Next subscribes again.
func (r *rabbit) drop() {
	if r.sub == nil {
		return
	}
	if err := r.sub.Close(); err != nil {
		r.log.Warn("closing the mq subscription", "error", err)
	}
	r.sub = nil
}
