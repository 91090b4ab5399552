package order

import (
	"context"

	"gorm.io/gorm"

	"seckill/internal/api"
	"seckill/internal/stock"
)

var rmwMode = Mode{
	Name:    api.ModeRMW,
	Short:   "GET, SET",
	Summary: "GET the shard's stock, check it, pause for the hold, SET it one lower: inside the product's lock, which decides everything.",
	Promises: "As much as the lock does: under a lock that excludes (token, fenced, redlock, etcd...) every unit is sold once. " +
		"On a product that is not a lab product the write is guarded besides: it lands only while the lease is still held, or the fence is unmoved.",
	Breaks: "With no lock, or a lock that does not exclude (local across processes, setnx-expire after a crash...), two buyers read the same " +
		"stock and each writes back its own decrement: more orders than stock. A lab product's write is not guarded, so a holder paused past its lease oversells.",
	Test: "TestOversellWithoutLock", Package: "./internal/server",
	where: stock.InRedis, Locked: true,
	taker:   func(l stock.Locked, _ *gorm.DB) stock.Taker { return stock.RMW{Locked: l} },
	moments: moments{crashAfterTake: true},
	seller:  rmw{},
}

type rmw struct{}

func (rmw) admit(*Service, LabOptions) error { return nil }

func (rmw) sell(ctx context.Context, s *Service, sl sale, rc *Receipt) (Order, error) {
	return s.takeInRedis(ctx, sl, rc, s.recordTaken)
}
