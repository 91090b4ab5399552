package session

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Outcomes of signing in a caller branches on.
var (
	// ErrBadCredentials: the name and password do not match an account;
	// said the same, after the same work, whether the name has an
	// account or not.
	ErrBadCredentials = errors.New("session: bad credentials")
	// ErrRevoked: the token's session was ended (logged out, or the
	// password changed); a 401 like ErrInvalid.
	ErrRevoked = fmt.Errorf("%w: the session was ended", ErrInvalid)
)

// RedisClient is what the desk needs of Redis: the sign-in throttle's
// script and counts, the sessions' revocations and the accounts' marks.
type RedisClient interface {
	redis.Scripter
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	MGet(ctx context.Context, keys ...string) *redis.SliceCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	PTTL(ctx context.Context, key string) *redis.DurationCmd
}

// DeskOptions configure a Desk.
type DeskOptions struct {
	Keys     *Keys
	Accounts *Accounts
	// Redis keeps the revocations and the throttle's counts, shared by
	// every instance. Required.
	Redis RedisClient
	// Demo lets a name without a password sign in to an account that has
	// none, made on its first sign-in: the lab's demo buyers. Default:
	// off.
	Demo bool
	// Throttle shapes the throttling of failed sign-ins.
	Throttle ThrottleOptions
	// Now reads the clock. Default: time.Now.
	Now func() time.Time
}

// Desk makes accounts, signs buyers in and out, and says whose a token is.
type Desk struct {
	keys     *Keys
	accounts *Accounts
	rdb      RedisClient
	demo     bool
	throttle throttle
	now      func() time.Time
}

// NewDesk builds a Desk from opt.
func NewDesk(opt DeskOptions) *Desk {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &Desk{keys: opt.Keys, accounts: opt.Accounts, rdb: opt.Redis, demo: opt.Demo, now: opt.Now,
		throttle: throttle{rdb: opt.Redis, opt: opt.Throttle.withDefaults()}}
}

// Demo reports whether names without a password sign in.
func (d *Desk) Demo() bool { return d.demo }

// Create makes an account with a password. A bad name is ErrBadName, a
// weak password ErrWeakPassword, a name with an account ErrNameTaken.
func (d *Desk) Create(ctx context.Context, name, password string) (Buyer, error) {
	name, err := CleanName(name)
	if err != nil {
		return Buyer{}, err
	}
	if err := CheckPassword(name, password); err != nil {
		return Buyer{}, err
	}
	hash, err := hashPassword(password)
	if err != nil {
		return Buyer{}, err
	}
	row, err := d.accounts.create(ctx, name, hash)
	if err != nil {
		return Buyer{}, err
	}
	if err := mark(ctx, d.rdb, row); err != nil {
		return Buyer{}, err
	}
	return row.buyer(), nil
}

// SignIn opens a session for the account of name, from the address addr
// (the throttle's). With a password it must be the account's; without
// one, it is the demo sign-in, which only a Desk with Demo on allows and
// only to an account that has no password. A wrong password, an unknown
// name, a demo sign-in to an account with a password are ErrBadCredentials
// alike; a pair that failed too often is a *ThrottledError.
func (d *Desk) SignIn(ctx context.Context, addr, name, password string) (Token, error) {
	name, err := CleanName(name)
	if err != nil {
		return Token{}, err
	}
	if password == "" {
		return d.demoSignIn(ctx, name)
	}
	if err := d.throttle.check(ctx, name, addr); err != nil {
		return Token{}, err
	}
	row, err := d.accounts.byName(ctx, name)
	if err != nil && !errors.Is(err, ErrNoAccount) {
		return Token{}, err
	}
	hash := row.Password
	if hash == "" { // no account, or one no password signs in to
		hash = dummyHash
	}
	if !passwordMatches(hash, password) || row.Password == "" {
		wait, err := d.throttle.failed(ctx, name, addr)
		if err != nil {
			return Token{}, err
		}
		if wait > 0 {
			return Token{}, fmt.Errorf("%w: %w", ErrBadCredentials, &ThrottledError{RetryAfter: wait})
		}
		return Token{}, fmt.Errorf("%w: no account has this name and password", ErrBadCredentials)
	}
	if err := d.throttle.succeeded(ctx, name, addr); err != nil {
		return Token{}, err
	}
	return d.open(ctx, row, name)
}

// demoSignIn signs a cleaned name in without a password.
func (d *Desk) demoSignIn(ctx context.Context, name string) (Token, error) {
	if !d.demo {
		return Token{}, fmt.Errorf("%w: a password is required (the demo sign-in by name is off)", ErrBadCredentials)
	}
	row, err := d.accounts.named(ctx, name)
	if err != nil {
		return Token{}, err
	}
	if row.Password != "" {
		passwordMatches(dummyHash, "") // the time of a password sign-in
		return Token{}, fmt.Errorf("%w: no account has this name and password", ErrBadCredentials)
	}
	return d.open(ctx, row, name)
}

// open issues a token for a new session of row, showing the name as the
// buyer spelled it this time (not as the account was first spelled, which
// would tell a stranger that the name exists and how its owner writes it).
// The account is marked (see MarkTTL) for as long as its token can live.
func (d *Desk) open(ctx context.Context, row accountRow, spelled string) (Token, error) {
	if err := mark(ctx, d.rdb, row); err != nil {
		return Token{}, err
	}
	b := row.buyer()
	b.Name = spelled
	return d.keys.Issue(b, newSessionID(), row.Generation)
}

// newSessionID draws a session id: 130 random bits (crypto/rand.Text).
func newSessionID() string { return rand.Text() }

// Verify says whose a token is: its signature and times (Keys.Parse), an
// account that exists (ErrNoAccount if none: a token signed with a leaked
// key for a made-up buyer or a lab user id), and a session not ended. All
// of it is read from Redis in one round trip on every call (MGET of the
// session's revocation, the account's generation and the account's mark,
// keys of one slot): logging out or changing the password on one instance
// ends the session on every other at once. An account without a mark is
// read from SQL, for at most AccountReadTimeout, and marked.
func (d *Desk) Verify(ctx context.Context, token string) (Buyer, error) {
	c, err := d.keys.Parse(token)
	if err != nil {
		return Buyer{}, err
	}
	id := c.Buyer.ID
	vals, err := d.rdb.MGet(ctx, revokedKey(id, c.Session), generationKey(id), markKey(id)).Result()
	if err != nil {
		return Buyer{}, fmt.Errorf("reading the session's revocation: %w", err)
	}
	mv, _ := vals[2].(string)
	created, gen, ok := parseMark(mv)
	if !ok {
		if created, gen, err = d.unmarked(ctx, id); err != nil {
			return Buyer{}, err // ErrNoAccount, signed with the key or not
		}
	}
	if s, ok := vals[1].(string); ok {
		if g, err := strconv.ParseInt(s, 10, 64); err == nil && g > gen {
			gen = g
		}
	}
	if vals[0] != nil || c.Generation < gen {
		return Buyer{}, ErrRevoked
	}
	return Buyer{ID: id, Name: c.Buyer.Name, Created: created}, nil
}

// unmarked reads the account of id from SQL, within AccountReadTimeout,
// and marks it.
func (d *Desk) unmarked(ctx context.Context, id int64) (created time.Time, gen int64, err error) {
	sqlCtx, cancel := context.WithTimeout(ctx, AccountReadTimeout)
	defer cancel()
	row, err := d.accounts.byID(sqlCtx, id)
	if err != nil {
		return time.Time{}, 0, err
	}
	if err := mark(ctx, d.rdb, row); err != nil {
		return time.Time{}, 0, err
	}
	return row.CreatedAt, row.Generation, nil
}

// Bulk opens a session for each name, making its account, without a
// password, if it has none: the operator's buyers for a load run, signed
// in at once. A name whose account has a password is ErrNameTaken: bulk
// creation never signs in to a person's account.
func (d *Desk) Bulk(ctx context.Context, names []string) ([]Token, error) {
	toks := make([]Token, len(names))
	for i, name := range names {
		name, err := CleanName(name)
		if err != nil {
			return nil, fmt.Errorf("name %d: %w", i, err)
		}
		row, err := d.accounts.named(ctx, name)
		if err != nil {
			return nil, err
		}
		if row.Password != "" {
			return nil, fmt.Errorf("%w: %q has a password", ErrNameTaken, name)
		}
		if toks[i], err = d.open(ctx, row, name); err != nil {
			return nil, err
		}
	}
	return toks, nil
}

// Current is Verify with the token's expiry, for GET /api/sessions/current.
func (d *Desk) Current(ctx context.Context, token string) (Buyer, time.Time, error) {
	b, err := d.Verify(ctx, token)
	if err != nil {
		return Buyer{}, time.Time{}, err
	}
	c, _ := d.keys.Parse(token) // Verify parsed it
	return b, c.Expires, nil
}

// SignOut ends the token's session on every instance: its id is kept
// revoked in Redis until the token would have expired anyway.
func (d *Desk) SignOut(ctx context.Context, token string) error {
	if _, err := d.Verify(ctx, token); err != nil {
		return err
	}
	c, _ := d.keys.Parse(token)
	ttl := c.Expires.Sub(d.now()) + leeway
	if err := d.rdb.Set(ctx, revokedKey(c.Buyer.ID, c.Session), 1, ttl).Err(); err != nil {
		return fmt.Errorf("revoking a session: %w", err)
	}
	return nil
}

// ChangePassword sets the account's new password, if password is its
// current one, and ends every session of the account, this one too: the
// generation is bumped in SQL (durable) and in Redis (read on every
// Verify, for as long as a token of the old generation could live).
func (d *Desk) ChangePassword(ctx context.Context, addr, token, password, fresh string) error {
	b, err := d.Verify(ctx, token)
	if err != nil {
		return err
	}
	row, err := d.accounts.byID(ctx, b.ID)
	if err != nil {
		return err
	}
	if err := d.throttle.check(ctx, row.Name, addr); err != nil {
		return err
	}
	if row.Password == "" || !passwordMatches(row.Password, password) {
		if _, err := d.throttle.failed(ctx, row.Name, addr); err != nil {
			return err
		}
		return fmt.Errorf("%w: the current password is not right", ErrBadCredentials)
	}
	if err := CheckPassword(row.Name, fresh); err != nil {
		return err
	}
	hash, err := hashPassword(fresh)
	if err != nil {
		return err
	}
	gen, err := d.accounts.setPassword(ctx, row.ID, row.Generation, hash)
	if err != nil {
		return err
	}
	if err := d.rdb.Set(ctx, generationKey(b.ID), gen, d.keys.Lifetime()+leeway).Err(); err != nil {
		return fmt.Errorf("ending the sessions of a changed password: %w", err)
	}
	row.Generation = gen
	return mark(ctx, d.rdb, row)
}

// revokedKey marks a session ended; generationKey holds an account's
// password generation. One hash tag per account (markKey's too): one MGET
// reads them on a cluster.
func revokedKey(buyer int64, sid string) string {
	return "seckill:session:{" + strconv.FormatInt(buyer, 10) + "}:revoked:" + sid
}

func generationKey(buyer int64) string {
	return "seckill:session:{" + strconv.FormatInt(buyer, 10) + "}:gen"
}
