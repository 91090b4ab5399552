package stock

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	"seckill/internal/idgen"
)

// Ticket is one purchase as the store sees it: the buyer, the order id drawn
// for it before the take, and the idempotency key that every retry of the
// same purchase carries.
type Ticket struct {
	User  int64
	Order idgen.ID
	Key   string
}

// Entry is the record of one take, kept in the shard's ledger and under the
// buyer: "order key shard millis", and " mq" for a take of the mq mode.
// Keys never contain spaces (the service checks them); an empty key (a row
// written before keys were kept, rebuilt or repaired) is recorded as
// noKey, so that the record keeps its four fields.
type Entry struct {
	User  int64 // the ledger's field; not part of the record
	Order idgen.ID
	Key   string
	Shard int
	At    time.Time // to the millisecond
	// MQ: the take's order goes through the message broker, so while the
	// broker's queue holds messages it may be one of them.
	MQ bool
}

func newEntry(t Ticket, shard int, at time.Time) Entry {
	return Entry{User: t.User, Order: t.Order, Key: t.Key, Shard: shard, At: at.Truncate(time.Millisecond)}
}

func (e Entry) record() string {
	r := e.Order.String() + " " + cmp.Or(e.Key, noKey) + " " + strconv.Itoa(e.Shard) + " " + strconv.FormatInt(e.At.UnixMilli(), 10)
	if e.MQ {
		r += " " + mqMark
	}
	return r
}

const (
	mqMark = "mq"
	noKey  = "-"
)

func parseEntry(user int64, s string) (Entry, error) {
	f := strings.Fields(s)
	mq := len(f) == 5 && f[4] == mqMark
	if len(f) != 4 && !mq {
		return Entry{}, fmt.Errorf("malformed take record %q", s)
	}
	order, err := idgen.ParseID(f[0])
	if err != nil {
		return Entry{}, fmt.Errorf("take record %q: %w", s, err)
	}
	shard, err1 := strconv.Atoi(f[2])
	ms, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil {
		return Entry{}, fmt.Errorf("malformed take record %q", s)
	}
	return Entry{User: user, Order: order, Key: f[1], Shard: shard, At: time.UnixMilli(ms), MQ: mq}, nil
}
