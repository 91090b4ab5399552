package order

import (
	"context"

	"gorm.io/gorm"

	"seckill/internal/api"
	"seckill/internal/stock"
)

var luaMode = Mode{
	Name:    api.ModeLua,
	Short:   "one script",
	Summary: "One Lua script checks the shard, decrements it and records the buyer, atomically; no lock. The order's row is written next.",
	Promises: "No oversell and no lock to wait for: Redis runs the script alone. One unit per buyer, and a retried take finds " +
		"the first one's record. A unit whose row could not be written goes back.",
	Breaks: "The take and the row are two systems: a process that dies between them leaves a unit out of the store and no order, " +
		"until the reconciler finds the take in the ledger and returns it. On a Redis that forgets (no AOF), a take it forgot is restored from the orders.",
	Test: "TestEveryBuyerGetsExactlyTheStock/none/lua", Package: "./internal/server",
	where:   stock.InRedis,
	taker:   func(stock.Locked, *gorm.DB) stock.Taker { return stock.Lua{} },
	moments: moments{crashAfterTake: true},
	seller:  lua{},
}

type lua struct{}

func (lua) admit(*Service, LabOptions) error { return nil }

func (lua) sell(ctx context.Context, s *Service, sl sale, rc *Receipt) (Order, error) {
	return s.takeInRedis(ctx, sl, rc, s.recordTaken)
}
