package lock

// Holding is what a lease wrote to hold its lock in the Redis it locks on:
// the lock key, and the value (a token lock's random string) or the hash
// field (the reentrant lock's owner) that names this holder. A script on
// that Redis that touches keys of the lock key's slot can check, in the step
// that writes, that the lock still names the holder: a holder paused past
// its lease then writes nothing, where the lease alone cannot stop it.
type Holding struct {
	Key string
	// Value is the string the lock key must hold; empty for a hash lock.
	Value string
	// Field is the hash field the lock key must have; empty for a string
	// lock.
	Field string
}

// HoldingOf returns what l wrote to hold its lock, for the leases whose lock
// names its holder in one key of the main Redis (token, watchdog, fenced and
// reentrant). Leases that write the same value for every holder (setnx and
// its variants, getset), hold their lock elsewhere (redlock's nodes, etcd,
// MySQL, this process's memory) or hold none report false: a store must
// fence those another way.
func HoldingOf(l Lease) (Holding, bool) {
	if h, ok := l.(interface{ holding() Holding }); ok {
		return h.holding(), true
	}
	return Holding{}, false
}

func (l *tokenLease) holding() Holding { return Holding{Key: l.key, Value: l.value.(string)} }

func (l *reentrantLease) holding() Holding { return Holding{Key: l.key, Field: l.owner} }
