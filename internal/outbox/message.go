package outbox

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/idgen"
	"seckill/internal/stock"
)

// QueuedOrder is one order read from a stream (or, in the mq mode, a
// broker's message): the message every Source delivers and every Sink
// writes. Its wire shape in a stream is async.lua's, stock's take, which
// appends it in the script that takes the unit; parseQueued reads it.
//
// The order is the take's own record, stock.Entry (its buyer, id, key,
// shard and time; MQ for the broker's), in an envelope that says where it
// was queued and what its row needs besides: the message is not a shape of
// its own between the take and the row.
type QueuedOrder struct {
	stock.Entry
	Stream string       // the stream it came from
	MsgID  string       // its entry id there
	Layout stock.Layout // of the shard it was taken from (Shards unknown: 0)
	Sale   int64
	Due    *time.Time // when its payment window ends, if its product has one
	Fields map[string]any
	// Mode is the name of the mode that took it: api.ModeAsync, or
	// api.ModeMQ for an order that came through the broker (then Stream and
	// MsgID are empty).
	Mode string
	// Trace is the W3C traceparent of the purchase's span that queued it
	// (the stream entry's field "trace", the message's header
	// "traceparent"); "" when the purchase was not traced.
	Trace string
}

// parseQueued reads one stream entry. A malformed entry is returned with
// the error, so that it can go to the dead letters.
func parseQueued(stream string, m redis.XMessage) (QueuedOrder, error) {
	q := QueuedOrder{Stream: stream, MsgID: m.ID, Fields: m.Values, Mode: api.ModeAsync}
	l, shard, err := stock.ParseStreamKey(stream)
	if err != nil {
		return q, err
	}
	q.Layout, q.Shard = l, shard
	field := func(name string) string { s, _ := m.Values[name].(string); return s }
	id, err := idgen.ParseID(field("id"))
	q.Order = id
	sale, err1 := strconv.ParseInt(field("sale"), 10, 64)
	user, err2 := strconv.ParseInt(field("user"), 10, 64)
	ms, err3 := strconv.ParseInt(field("at"), 10, 64)
	q.Sale, q.User, q.Key, q.At, q.Trace = sale, user, field("key"), time.UnixMilli(ms), field("trace")
	if due, _ := strconv.ParseInt(field("due"), 10, 64); due > 0 {
		d := time.UnixMilli(due)
		q.Due = &d
	}
	if err := errors.Join(err, err1, err2, err3); err != nil || id == 0 || user <= 0 {
		return q, fmt.Errorf("malformed queued order %s in %s: %v", m.ID, stream, m.Values)
	}
	return q, nil
}
