package order

import (
	"fmt"

	"gorm.io/gorm"

	"seckill/internal/api"
	"seckill/internal/stock"
)

var sqlrmwMode = Mode{
	Name:    api.ModeSQLRMW,
	Short:   "SELECT, UPDATE, COMMIT",
	Summary: "SELECT the shard's stock, then UPDATE it to the value read minus one, in the order's transaction, inside the product's lock.",
	Promises: "Held until the COMMIT, the lock makes the read and the write one step, and the order commits with the unit. " +
		"On a product that is not a lab product the UPDATE also requires the stock it read, so a lost lease sells nothing.",
	Breaks: "A lock released before the COMMIT (the fault release_before_commit, or a lease that expired) lets the next holder read the stock " +
		"before the last write is visible: both sell the same unit.",
	Test: "TestSQLRMWReleaseBeforeCommit", Package: "./internal/order",
	where: stock.InSQL, Locked: true,
	taker:   func(l stock.Locked, tx *gorm.DB) stock.Taker { return stock.SQLRMW{Tx: tx, Locked: l} },
	moments: moments{releaseBeforeCommit: true},
	seller:  sqlrmw{},
}

type sqlrmw struct{ inSQL }

func (sqlrmw) admit(s *Service, lab LabOptions) error {
	if lab.Faults.ReleaseBeforeCommit && s.db.Dialector.Name() == "sqlite" {
		return fmt.Errorf("%w: release_before_commit needs MySQL: SQLite's one connection runs one transaction at a time, so no holder reads before the last one's COMMIT", ErrInvalid)
	}
	return nil
}
