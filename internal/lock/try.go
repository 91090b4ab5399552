package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Try takes key for ttl with l unless another holds it, for a job that
// one process at a time should run (a reconciler's pass, a rebuild) and
// that another process may simply skip. It returns the release, or nil
// when another holds the key. The release takes at most step and logs to
// log a lease it could not release (it expires); a lease that expired
// already (ErrNotHeld) is another's now, and is left to it.
func Try(ctx context.Context, l Locker, key string, ttl, step time.Duration, log *slog.Logger) (release func(), err error) {
	lease, err := l.Acquire(ctx, key, Options{TTL: ttl})
	if errors.Is(err, ErrNotObtained) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("taking the lease %s: %w", key, err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), step)
		defer cancel()
		if err := lease.Release(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
			log.Warn("a lease was not released; it expires", "key", key, "error", err)
		}
	}, nil
}
