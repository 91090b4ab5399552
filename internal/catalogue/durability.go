package catalogue

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
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

// replicateByDefault makes an async product that is not a lab product
// replicated (Product.Replicated: its 202 waits until a replica has the
// take and the queued entry) on a Redis Cluster whose every slot has a
// replica: a failover that promotes a replica without the entry, or a stale
// master that takes back over, would lose an order its buyer was told of.
// A product asked replicated stays so; one without a replica to wait for
// (one Redis, a cluster without replicas) is left as it is, and its 202
// survives what the durability says, not a failover. Read at the reset:
// replicas added later change nothing until the next.
func (c *Catalogue) replicateByDefault(ctx context.Context, p *Product) error {
	cc, ok := c.rdb.(*redis.ClusterClient)
	if p.Replicated || p.Lab || p.Mode != api.ModeAsync || !ok {
		return nil
	}
	// Asked of each master: another node's slot map may not list a
	// replica that joined lately.
	var bare atomic.Bool
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		info, err := m.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "slave0:") {
			bare.Store(true)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading the cluster's replicas: %w", err)
	}
	p.Replicated = !bare.Load()
	return nil
}
