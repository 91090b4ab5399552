package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"seckill/internal/idgen"
	"seckill/internal/telemetry"
)

var (
	//go:embed async.lua
	asyncLua    string
	asyncScript = redis.NewScript(asyncLua)
)

// Async takes with lua's script that also queues the order on the shard's
// stream (async.lua), under the ticket's order id, drawn before the take:
// the unit and the queued order are one step. It is one script on one
// Redis and on a cluster alike; on a cluster a stream that was closed is
// enrolled first, and the script run again (registry.go).
type Async struct{}

var _ Taker = Async{}

// Where is Redis.
func (Async) Where() Where { return InRedis }

func (Async) writeLock() *Locked { return nil }

func (Async) takeShard(ctx context.Context, s *Store, r Request, t *Taken) (bool, error) {
	r.Hooks.sent(t.Shard)
	ok, err := s.takeAsync(ctx, r, t)
	r.Hooks.done(ok, err)
	return ok, err
}

func (s *Store) takeAsync(ctx context.Context, r Request, t *Taken) (bool, error) {
	p := r.Product
	if r.Ticket.Order == 0 {
		return false, errors.New("stock: an async take needs the order id drawn for it")
	}
	raw := r.Ticket.Order.String()
	stream := p.StreamKey(t.Shard)
	keys := []string{p.StockKey(t.Shard), p.LedgerKey(t.Shard), stream}
	if s.split {
		keys = append(keys, p.ShardPendingKey(t.Shard), GenerationKey(stream))
	} else {
		keys = append(keys, PendingKey(r.Ticket.Order.Time()), p.BuyerKey(r.Ticket.User), s.streams)
	}
	var due int64
	if p.PayTimeout > 0 {
		due = t.At.Add(p.PayTimeout).UnixMilli()
	}
	// The enqueue is the script's: its span is the one the queued entry
	// names, for the consumer's batch to link to. It stays here, in stock,
	// though the outbox reads, claims and acknowledges the streams: the
	// entry is appended in the step that takes the unit (async.lua), and
	// moving the enqueue out would split that atomic step in two.
	ectx, span := telemetry.Start(ctx, "outbox.enqueue")
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("seckill.order_id", raw), attribute.String("messaging.destination.name", stream))
	}
	gen := ""
	for range maxReopens {
		res, err := asyncScript.Run(ectx, s.rdb, keys, r.Ticket.User, r.Ticket.Key, t.Shard, t.At.UnixMilli(),
			raw, pendingTTL.Milliseconds(), p.ID, p.Sale, Group, due, r.Hooks.queueKey(r.Ticket.Key), telemetry.TraceParent(ectx), gen).Slice()
		telemetry.Fail(span, err)
		if err != nil {
			return false, unanswered(fmt.Errorf("taking from shard %d of product %d: %w", t.Shard, p.ID, err))
		}
		if code, _ := res[0].(int64); code != replyClosed {
			return s.reply(p, t.Shard, r.Ticket.User, res)
		}
		// The stream is closed: enrol it at its generation, and open it
		// with the take, unless a consumer closed it again meanwhile.
		gen, _ = res[1].(string)
		if err := Enrol(ctx, s.rdb, s.streams, stream, gen); err != nil {
			return false, err
		}
	}
	return false, fmt.Errorf("taking from shard %d of product %d: its stream %s was closed %d times during the take", t.Shard, p.ID, stream, maxReopens)
}

// maxReopens bounds the enrolments of one take. A drained stream is
// closed only after it took no order for a while (the outbox's
// RedisStreams.ForgetDrained), but a close of a stream enrolled and not
// opened yet moves its generation on too, and turns the take back once
// more; with the consumers' pass a few seconds apart a take meets that
// rarely, and maxReopens in a row means a closer running without pause.
// The take then gives up, having taken nothing.
const maxReopens = 5

// pendingTTL is how long a day's pending index lives after its first
// order: its day and at least one more, so that a process whose clock lags
// still finds it (the TTL idgen.Redis gives its day keys).
const pendingTTL = idgen.DefaultKeyTTL
