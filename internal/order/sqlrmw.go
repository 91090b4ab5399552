package order

import (
	"context"

	"seckill/internal/stock"
)

// release gives up the sqlrmw mode's lock after the COMMIT (or, under the
// lab's fault, before it). The sale does not hang on it: a release that
// fails leaves the lock to expire, as rmw's does.
func (s *Service) release(ctx context.Context, held *stock.Held, rc *Receipt) {
	lost, err := held.Release(ctx)
	rc.LeaseLost = rc.LeaseLost || lost
	if err != nil {
		s.log.Warn("the lock was not released after the commit; it will expire", "error", err)
	}
}
