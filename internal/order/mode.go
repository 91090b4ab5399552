package order

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"gorm.io/gorm"

	"seckill/internal/catalogue"
	"seckill/internal/lock"
	"seckill/internal/stock"
)

// Mode is one way to sell a unit: how it leaves the stock and how its order
// is written. The modes are one file each (mode_*.go), listed in teaching
// order in the one table below, as the lock ladder lists its strategies;
// GET /api/modes shows the table. A mode that sells differently is one file
// holding its Mode and its seller, and one row here.
type Mode struct {
	// Name is the user-facing identifier (the API's "mode").
	Name string
	// Short names its steps in a few words, for the page's menu.
	Short string
	// Summary says in one line how the unit is taken and the order written.
	Summary string
	// Promises says what the mode guarantees a buyer and the stock.
	Promises string
	// Breaks says what still goes wrong, and how.
	Breaks string
	// Test names the test that shows it, as `go test -run Test Package`
	// takes them.
	Test, Package string
	// where is the store the mode takes its units from, and so the store
	// that holds its products' stock.
	where stock.Where
	// taker is how the unit leaves the store (stock's Taker), built under
	// locked for the modes that take inside the product's lock, and in tx
	// for those that take in SQL (tx is nil outside a purchase).
	taker func(locked stock.Locked, tx *gorm.DB) stock.Taker
	// Locked: the take reads and then writes an absolute value, so it runs
	// inside the product's lock, and whatever else writes that shard's stock
	// (a unit given back) must take the lock too.
	Locked bool
	// Queued: the buyer is answered once the order is queued, before its
	// row is written; until then the take in Redis is all that stands for
	// it, so the Redis must keep what it answered (catalogue's checkDurable).
	Queued bool

	// moments are the lab faults that have a moment to happen in the mode;
	// a purchase asking for another is refused (refuseFaults).
	moments moments

	seller seller
}

// moments says which of the lab's purchase faults a mode has a moment for.
type moments struct {
	crashAfterTake      bool // a take, then a separate write or publish
	poison              bool // an order queued before its row
	releaseBeforeCommit bool // a lock released around a transaction
}

// seller is what a mode does with one purchase.
type seller interface {
	// admit refuses what the mode cannot do for a purchase on this
	// service's backends (the faults with no moment in the mode are
	// refused before, from the table: refuseFaults).
	admit(s *Service, lab LabOptions) error
	// sell takes the unit for sl and writes, queues or publishes its order.
	sell(ctx context.Context, s *Service, sl sale, rc *Receipt) (Order, error)
}

// modes is the table: every mode, in teaching order.
var modes = []Mode{rmwMode, luaMode, dbMode, sqlrmwMode, asyncMode, mqMode}

// Modes lists the modes in teaching order.
func Modes() []Mode { return slices.Clone(modes) }

// ModeNames lists the modes' names in teaching order.
func ModeNames() []string {
	names := make([]string, len(modes))
	for i, m := range modes {
		names[i] = m.Name
	}
	return names
}

// ModeNamed returns the mode of a user-facing name, or an error wrapping
// ErrInvalid and ErrUnknownMode.
func ModeNamed(name string) (Mode, error) {
	for _, m := range modes {
		if m.Name == name {
			return m, nil
		}
	}
	return Mode{}, fmt.Errorf("%w: %w %q (want one of %s)", ErrInvalid, ErrUnknownMode, name, strings.Join(ModeNames(), ", "))
}

// modeOf is a stored product's mode, known to be in the table (validate
// refused any other); a product written by a newer version selling a mode
// this one lacks reads as the default, rmw, whose give-back takes the lock:
// the cautious guess.
func modeOf(name string) Mode {
	m, err := ModeNamed(name)
	if err != nil {
		return rmwMode
	}
	return m
}

// QueuedModes names the modes whose buyers are answered before the row.
func QueuedModes() []string {
	var out []string
	for _, m := range modes {
		if m.Queued {
			out = append(out, m.Name)
		}
	}
	return out
}

// ModeOf is the product's mode (see modeOf).
func ModeOf(p catalogue.Product) Mode { return modeOf(p.Mode) }

// Command is the go test command that runs the mode's Test.
func (m Mode) Command() string {
	parts := strings.Split(m.Test, "/")
	for i, p := range parts {
		parts[i] = "^" + p + "$"
	}
	return fmt.Sprintf("go test -race %s -run '%s'", m.Package, strings.Join(parts, "/"))
}

// Store is where the mode takes its units from.
func (m Mode) Store() stock.Where { return m.where }

// Taker is the mode's taker outside a purchase, for a give-back or a
// restore: those of a Locked mode take the shard's lock under locked.
func (m Mode) Taker(locked stock.Locked) stock.Taker { return m.taker(locked, nil) }

// locked is what a purchase's taker needs of the product's lock, for the
// Locked modes; the others take no lock.
func (s *Service) locked(locker lock.Locker, lab LabOptions) stock.Locked {
	return stock.Locked{Locker: locker, Lock: lock.Options{TTL: s.opt.LockTTL, Wait: s.opt.LockWait, Fault: lab.Faults.Lock},
		GiveBackWait: s.Budget().GiveBackWait()}
}

// sale is one purchase on its way through a mode.
type sale struct {
	p    catalogue.Product
	mode Mode
	// locked is the take's lock, for the taker of a Locked mode.
	locked stock.Locked
	req    stock.Request // its Taker takes outside SQL (tx nil)
	lab    LabOptions
	// gen is what Repairs.AwaitRepair returned: the server changes the product's
	// shards were repaired after.
	gen uint64
	// retry: the client sent its own idempotency key, so this may repeat
	// a purchase that took a unit before the product sold out.
	retry bool
}

// refuseFaults refuses the lab faults the mode has no moment for.
func refuseFaults(m Mode, lab LabOptions) error {
	f := lab.Faults
	switch {
	case f.CrashAfterTake && !m.moments.crashAfterTake:
		return fmt.Errorf("%w: crash_after_take: the %s mode takes the unit and records the order in one atomic step, with no moment in between",
			ErrInvalid, m.Name)
	case f.Poison && !m.moments.poison:
		return errPoisonNeedsMySQL
	case f.ReleaseBeforeCommit && !m.moments.releaseBeforeCommit:
		return fmt.Errorf("%w: release_before_commit is a fault of the sqlrmw mode, not of %s", ErrInvalid, m.Name)
	}
	return nil
}

var errPoisonNeedsMySQL = fmt.Errorf("%w: poison: a queued order whose row the database refuses needs the async mode and a database that keeps column sizes (MySQL; SQLite would store it)",
	ErrInvalid)
