package session

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// An account's mark in Redis says that the account exists, when it was
// made and its password generation as last written: what Desk.Verify
// needs of it, read in the MGET that reads the session's revocation, so
// that checking a token's account costs the purchase path no round trip
// and no SQL. It is written when the account is made, at each sign-in, by
// Accounts.Numbered, at a password change, and by Verify after it read an
// account without a mark from SQL (an account older than its mark's
// lifetime, or a Redis restarted empty). That read is bounded by
// AccountReadTimeout: a database that does not answer makes the token's
// request fail (503), never hang.

// MarkTTL is how long an account's mark lives past its last writing.
const MarkTTL = 24 * time.Hour

// AccountReadTimeout bounds Verify's SQL read of an account without a
// mark.
const AccountReadTimeout = time.Second

// markKey is the key of buyer's mark: the account's hash tag, so that one
// MGET reads it with the session's keys on a cluster.
func markKey(buyer int64) string {
	return "seckill:session:{" + strconv.FormatInt(buyer, 10) + "}:account"
}

// MarkKeys are the keys of buyers' marks: for a load test that made the
// accounts for its run, to delete what it leaves in a shared Redis (a
// mark lives MarkTTL, and a run makes thousands).
func MarkKeys(buyers ...int64) []string {
	keys := make([]string, len(buyers))
	for i, b := range buyers {
		keys[i] = markKey(b)
	}
	return keys
}

// markValue is "<created, Unix ns>:<generation>".
func markValue(r accountRow) string {
	return strconv.FormatInt(r.CreatedAt.UnixNano(), 10) + ":" + strconv.FormatInt(r.Generation, 10)
}

// parseMark reads a mark's value back: the creation time and generation.
func parseMark(v string) (created time.Time, gen int64, ok bool) {
	c, g, found := strings.Cut(v, ":")
	ns, err1 := strconv.ParseInt(c, 10, 64)
	gen, err2 := strconv.ParseInt(g, 10, 64)
	if !found || err1 != nil || err2 != nil {
		return time.Time{}, 0, false
	}
	return time.Unix(0, ns), gen, true
}

// mark writes the marks of rows.
func mark(ctx context.Context, rdb pipeliner, rows ...accountRow) error {
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range rows {
			p.Set(ctx, markKey(r.buyer().ID), markValue(r), MarkTTL)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("marking %d accounts in Redis: %w", len(rows), err)
	}
	return nil
}

// pipeliner is what mark needs of a Redis client.
type pipeliner interface {
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}
