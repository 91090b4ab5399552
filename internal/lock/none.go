package lock

import "context"

// None takes no lock at all: the baseline that shows what the others prevent.
type None struct{}

var _ Locker = None{}

// Acquire always succeeds at once.
func (None) Acquire(context.Context, string, Options) (Lease, error) { return noLease{}, nil }

type noLease struct{}

func (noLease) Release(context.Context) error { return nil }
func (noLease) Token() uint64                 { return 0 }
