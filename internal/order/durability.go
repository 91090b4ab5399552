package order

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"seckill/internal/api"
	"seckill/internal/durability"
	"seckill/internal/idgen"
)

// ErrNotDurable: a product that is not a lab product asked for a mode
// whose answer rests on Redis (async, mq) on a Redis that keeps nothing.
var ErrNotDurable = errors.New("order: Redis keeps nothing across a restart")

// Durability is what Redis keeps of an answered write, read again when it
// may have changed (see durability.Watch). Settings it cannot read, or a
// Redis that does not answer, are durability.None, with the reason.
func (c *Catalogue) Durability(ctx context.Context) durability.Reading {
	r, err := c.durable.Get(ctx)
	if err != nil {
		return durability.Reading{Level: durability.None, Reason: "the persistence settings could not be read: " + err.Error()}
	}
	return r
}

// durabilityDropped is told when a reading finds Redis keeping less than
// before (CONFIG SET, or a restart with other settings). The products
// already created keep their mode: their views say the new durability.
func (c *Catalogue) durabilityDropped(before, now durability.Reading) {
	c.log.Warn("Redis keeps less than it did: a 202 of an async or mq product rests on it",
		"before", before.Level, "now", now.Level, "reason", now.Reason)
}

// checkDurable refuses a product that is not a lab product and whose mode
// answers 202 from Redis (async: the order is only in a stream; mq: the
// take is only in Redis, and a rebuild refuses its queued orders) when
// Redis keeps nothing. It reads the settings afresh: a reset is rare.
// A lab product may: the async-durability scenario shows what is lost.
func (c *Catalogue) checkDurable(ctx context.Context, p Product) error {
	if p.Lab || !p.mode().Queued {
		return nil
	}
	r, err := c.durable.Fresh(ctx)
	if err != nil {
		return err
	}
	if r.Level != durability.None {
		return nil
	}
	return fmt.Errorf("%w: %s; a product in the %s mode answers 202 before its order is written, and such a 202 would not survive a restart: turn on appendonly, or create a lab product",
		ErrNotDurable, r.Reason, p.Mode)
}

// rebuiltNote is what an audit cannot count after a rebuild.
const rebuiltNote = "the orders answered 202 and still queued when Redis lost the stock: " +
	"the async mode's stream was lost with it, and an mq order of the lost layout is refused when it arrives (a dead letter); " +
	"their units are back on sale and their buyers find the orders missing or failed"

// judge sets an audit's verdict from what its counts cannot tell alone:
// queued entries whose orders are written already (SETTLING), and a
// rebuild that lost queued orders (REBUILT). Each only replaces OK, so a
// real fault is never hidden.
func judge(a *api.Audit, p Product) {
	if p.RebuiltAt != nil {
		a.Rebuilt = &api.Rebuilt{At: *p.RebuiltAt, Uncounted: "nothing: every order was answered after its row was written"}
		if p.Lab || p.mode().Queued {
			a.Rebuilt.Uncounted = rebuiltNote
			if a.Verdict == api.VerdictOK {
				a.Verdict = api.VerdictRebuilt
			}
		}
	}
	if a.Replaying > 0 && a.Verdict == api.VerdictOK {
		a.Verdict = api.VerdictSettling
	}
}

// written counts those of ids that have a row: an order in any status, or
// a void row.
func (s *Service) written(ctx context.Context, ids []idgen.ID) (int, error) {
	n := 0
	for chunk := range slices.Chunk(ids, 1000) {
		var c int64
		if err := s.db.WithContext(ctx).Model(&Order{}).Where("id IN ?", chunk).Count(&c).Error; err != nil {
			return 0, fmt.Errorf("looking the queued orders up: %w", err)
		}
		n += int(c)
	}
	return n, nil
}
