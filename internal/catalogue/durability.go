package catalogue

import (
	"context"
	"fmt"

	"seckill/internal/durability"
)

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

// Reconnected is told of every new connection to Redis: it may be to a
// server that restarted with other persistence settings, so the durability
// is read again on its next use.
func (c *Catalogue) Reconnected() { c.durable.Stale() }

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
	if p.Lab {
		return nil
	}
	if mode, err := c.opt.Mode(p.Mode); err != nil || !mode.Queued {
		return err
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
