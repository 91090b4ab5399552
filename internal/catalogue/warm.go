package catalogue

import (
	"context"
	"fmt"
)

// Warm readies a sale that opens later for its opening second, so that
// its first purchases find nothing to load. Reset calls it when the new
// sale's StartsAt is in the future; what it leaves to the reset itself:
//
//   - the stock is laid out in every shard (the reset's layOut);
//   - the sold-out flags are cleared in every process, and every process
//     whose flag was set tells the edge gate (the reset's notice on
//     resetChannel: followNotices, and stock.Flags.OnCleared);
//   - every process drops its cached copy of the product (the same
//     notice) and reads it again at its first request for it: an early
//     click, a product view, or a purchase at the opening.
//
// What it does itself: the purchase's scripts loaded on every master
// (stock.Store.LoadScripts). What it cannot: a process's first block of
// order ids is reserved in SQL at its first draw (idgen.Segments; a day's
// next, a minute before its midnight), and the lock strategies' scripts
// load at their first use.
func (c *Catalogue) Warm(ctx context.Context, p Product) error {
	if err := c.stock.LoadScripts(ctx); err != nil {
		return fmt.Errorf("warming product %d: %w", p.ID, err)
	}
	return nil
}
