package order

import (
	"context"
	"fmt"

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

// checkReleaseBeforeCommit refuses the release_before_commit fault where it
// cannot teach: outside the sqlrmw mode, which alone holds a lock across a
// COMMIT, and on SQLite, whose one connection runs one transaction at a
// time, so that the next holder cannot read before the COMMIT whenever the
// lock is released.
func (s *Service) checkReleaseBeforeCommit(f Fault, mode stock.Mode) error {
	switch {
	case !f.ReleaseBeforeCommit:
		return nil
	case mode != stock.SQLRMW:
		return fmt.Errorf("%w: release_before_commit is a fault of the sqlrmw mode, not of %s", ErrInvalid, mode)
	case s.db.Dialector.Name() == "sqlite":
		return fmt.Errorf("%w: release_before_commit needs MySQL: SQLite's one connection runs one transaction at a time, so no holder reads before the last one's COMMIT", ErrInvalid)
	}
	return nil
}
