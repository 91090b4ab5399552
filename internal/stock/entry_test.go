package stock

import (
	"testing"
	"time"
)

// A take rebuilt or repaired from an order row written before keys were
// kept has no key; its record must still read back, or the ledger cannot be
// read at all.
func TestRecordWithoutKeyReadsBack(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	for _, e := range []Entry{
		{User: 7, Order: 42, Key: "", Shard: 3, At: at},
		{User: 7, Order: 42, Key: "k-1", Shard: 3, At: at, MQ: true},
	} {
		got, err := parseEntry(e.User, e.record())
		if err != nil {
			t.Fatalf("record %q of %+v: %v", e.record(), e, err)
		}
		if got.Order != e.Order || got.Shard != e.Shard || !got.At.Equal(e.At) || got.MQ != e.MQ {
			t.Errorf("record %q read back as %+v, want %+v", e.record(), got, e)
		}
		if e.Key != "" && got.Key != e.Key {
			t.Errorf("key read back as %q, want %q", got.Key, e.Key)
		}
	}
}
