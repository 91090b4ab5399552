package stock

import (
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
// buyer: "order key shard millis". Keys never contain spaces (the service
// checks them).
type Entry struct {
	User  int64 // the ledger's field; not part of the record
	Order idgen.ID
	Key   string
	Shard int
	At    time.Time // to the millisecond
}

func newEntry(t Ticket, shard int, at time.Time) Entry {
	return Entry{User: t.User, Order: t.Order, Key: t.Key, Shard: shard, At: at.Truncate(time.Millisecond)}
}

func (e Entry) record() string {
	return e.Order.String() + " " + e.Key + " " + strconv.Itoa(e.Shard) + " " + strconv.FormatInt(e.At.UnixMilli(), 10)
}

func parseEntry(user int64, s string) (Entry, error) {
	f := strings.Fields(s)
	if len(f) != 4 {
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
	return Entry{User: user, Order: order, Key: f[1], Shard: shard, At: time.UnixMilli(ms)}, nil
}
