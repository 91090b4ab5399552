package session

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrThrottled: too many failed sign-ins from this address for this name;
// ThrottledError says how long to wait.
var ErrThrottled = errors.New("session: too many failed sign-ins")

// ThrottledError is ErrThrottled with the wait.
type ThrottledError struct{ RetryAfter time.Duration }

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("%v: try again in %s", ErrThrottled, e.RetryAfter.Round(time.Second))
}

func (e *ThrottledError) Unwrap() error { return ErrThrottled }

// RetryIn is when to try again: the Retry-After the client is told.
func (e *ThrottledError) RetryIn() time.Duration { return e.RetryAfter }

var (
	//go:embed throttle.lua
	throttleLua    string
	throttleScript = redis.NewScript(throttleLua)
)

// ThrottleOptions shape the sign-in throttle. The zero value of a field
// is its default.
type ThrottleOptions struct {
	// Free is how many failures one address may make on one name before
	// it waits. Default: 5.
	Free int
	// Loose is how many failures one name may take from all addresses
	// together before every address that failed on it waits from its
	// first failure. Default: 50.
	Loose int
	// Base is the first wait; each failure past the free ones doubles
	// it. Default: 1s.
	Base time.Duration
	// Cap is the longest wait. Default: 15m.
	Cap time.Duration
	// Window is how long failures are remembered after the last.
	// Default: 1h.
	Window time.Duration
}

func (o ThrottleOptions) withDefaults() ThrottleOptions {
	if o.Free <= 0 {
		o.Free = 5
	}
	if o.Loose <= 0 {
		o.Loose = 50
	}
	if o.Base <= 0 {
		o.Base = time.Second
	}
	if o.Cap <= 0 {
		o.Cap = 15 * time.Minute
	}
	if o.Window <= 0 {
		o.Window = time.Hour
	}
	return o
}

// throttle slows the guessing of a password without letting a guesser
// lock its owner out. The strict count is per (name, address): a few free
// failures, then a wait that doubles with each, up to a cap. The loose
// count is per name, over all addresses: past it, an address that has
// failed on the name waits from its first failure, so a guesser spread
// over many addresses gets about one try each, not Free each. No count
// ever stops an address that has not failed on the name: its first try
// is always judged, so the owner, signing in from their own address with
// the right password, gets in during any attack on their account. Names
// with no account are counted alike, so the throttle does not tell which
// names exist.
type throttle struct {
	rdb RedisClient
	opt ThrottleOptions
}

// keys are the pair's failures and wait and the name's failures, under
// one hash tag (a digest of the name: short, and no name in a key).
func (t throttle) keys(name, addr string) []string {
	sum := sha256.Sum256(nameKey(name))
	tag := "seckill:signin:{" + hex.EncodeToString(sum[:12]) + "}"
	return []string{tag + ":fail:" + addr, tag + ":wait:" + addr, tag + ":fail"}
}

// check refuses with a *ThrottledError while the pair waits.
func (t throttle) check(ctx context.Context, name, addr string) error {
	ms, err := t.rdb.PTTL(ctx, t.keys(name, addr)[1]).Result()
	if err != nil {
		return fmt.Errorf("reading the sign-in throttle: %w", err)
	}
	if ms > 0 {
		return &ThrottledError{RetryAfter: ms}
	}
	return nil
}

// failed counts a failure and returns the wait it sets, 0 for none.
func (t throttle) failed(ctx context.Context, name, addr string) (time.Duration, error) {
	o := t.opt
	ms, err := throttleScript.Run(ctx, t.rdb, t.keys(name, addr), o.Window.Milliseconds(), o.Free, o.Loose,
		o.Base.Milliseconds(), o.Cap.Milliseconds()).Int64()
	if err != nil {
		return 0, fmt.Errorf("counting a failed sign-in: %w", err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// succeeded forgets the pair's failures; the name's stay until the
// window ends, so a guesser who also knows one password gains nothing.
func (t throttle) succeeded(ctx context.Context, name, addr string) error {
	k := t.keys(name, addr)
	if err := t.rdb.Del(ctx, k[0], k[1]).Err(); err != nil {
		return fmt.Errorf("clearing the sign-in throttle: %w", err)
	}
	return nil
}
