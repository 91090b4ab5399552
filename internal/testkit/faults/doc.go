// Package faults holds no code: its tests prove the sale path's promise
// (docs/INVARIANT.md) against real processes that they start themselves and
// pause (SIGSTOP) or kill (SIGKILL) in the middle of a burst — a Redis, a
// database, a service instance — never the shared servers REDIS_ADDR and
// MYSQL_DSN name. Each verdict is computed from the data: the orders in SQL
// against the stock, the ledger and the buyers in Redis, and what every
// client was told.
package faults
