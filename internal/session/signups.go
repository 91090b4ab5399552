package session

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/admission"
)

// Outcomes of the sign-up limits a caller branches on.
var (
	// ErrSignupsLimited: the address or its network made as many accounts
	// as the window allows; SignupsLimitedError says how long to wait.
	ErrSignupsLimited = errors.New("session: too many accounts from this address")
	// ErrCaptchaRequired: the network made its first few accounts; the
	// next needs a solved captcha.
	ErrCaptchaRequired = errors.New("session: solve a captcha to make another account")
)

// SignupsLimitedError is ErrSignupsLimited with the wait.
type SignupsLimitedError struct {
	RetryAfter time.Duration
	What       string
}

func (e *SignupsLimitedError) Error() string {
	return fmt.Sprintf("%v: %s; try again in %s", ErrSignupsLimited, e.What, e.RetryAfter.Round(time.Second))
}

func (e *SignupsLimitedError) Unwrap() error { return ErrSignupsLimited }

// RetryIn is when to try again: the Retry-After the client is told.
func (e *SignupsLimitedError) RetryIn() time.Duration { return e.RetryAfter }

// The sign-up limits' defaults (SignupOptions).
const (
	DefaultSignupWindow     = time.Hour
	DefaultSignupsAddress   = 5
	DefaultSignupsNetwork   = 20
	DefaultSignupsNoCaptcha = 2
)

// SignupOptions bound the accounts made from one place. A count below 0
// turns its limit off; 0 is its default.
type SignupOptions struct {
	// Window is the span the counts are kept over. Default:
	// DefaultSignupWindow (an hour).
	Window time.Duration
	// PerAddress is how many accounts one address may make per window.
	// Default: DefaultSignupsAddress (5).
	PerAddress int
	// PerNetwork is how many accounts one network (an IPv4 /24, an IPv6
	// /64: what one household or one rented server holds) may make per
	// window. Default: DefaultSignupsNetwork (20).
	PerNetwork int
	// NoCaptcha is how many accounts a network makes per window before
	// each further one needs a captcha. Default: DefaultSignupsNoCaptcha
	// (2).
	NoCaptcha int
}

func (o SignupOptions) withDefaults() SignupOptions {
	if o.Window <= 0 {
		o.Window = DefaultSignupWindow
	}
	def := func(n *int, d int) {
		if *n == 0 {
			*n = d
		}
	}
	def(&o.PerAddress, DefaultSignupsAddress)
	def(&o.PerNetwork, DefaultSignupsNetwork)
	def(&o.NoCaptcha, DefaultSignupsNoCaptcha)
	return o
}

// Signups counts the accounts made per address and per network in fixed
// windows in Redis, shared by every instance. A sybil buyer needs many
// accounts; many accounts need many networks, which cost far more than
// many names.
type Signups struct {
	rdb redis.Cmdable
	opt SignupOptions
}

// NewSignups returns the limits of opt, counted in rdb.
func NewSignups(rdb redis.Cmdable, opt SignupOptions) *Signups {
	return &Signups{rdb: rdb, opt: opt.withDefaults()}
}

// Check says whether addr may make an account now, without counting it:
// a *SignupsLimitedError past a limit, ErrCaptchaRequired when its network
// has made NoCaptcha accounts in the window and solved is false.
func (s *Signups) Check(ctx context.Context, addr netip.Addr, solved bool) error {
	keys, ttl := s.keys(addr)
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return fmt.Errorf("reading the sign-up counts: %w", err)
	}
	count := func(v any) int {
		n, _ := strconv.Atoi(fmt.Sprint(v))
		return n
	}
	byAddr, byNet := count(vals[0]), count(vals[1])
	o := s.opt
	switch {
	case o.PerAddress > 0 && byAddr >= o.PerAddress:
		return &SignupsLimitedError{RetryAfter: ttl, What: fmt.Sprintf("at most %d accounts per address per %s", o.PerAddress, o.Window)}
	case o.PerNetwork > 0 && byNet >= o.PerNetwork:
		return &SignupsLimitedError{RetryAfter: ttl, What: fmt.Sprintf("at most %d accounts per network (%s) per %s", o.PerNetwork, admission.Network(addr), o.Window)}
	case o.NoCaptcha >= 0 && byNet >= o.NoCaptcha && !solved:
		return ErrCaptchaRequired
	}
	return nil
}

// Made counts an account made from addr.
func (s *Signups) Made(ctx context.Context, addr netip.Addr) error {
	keys, _ := s.keys(addr)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Incr(ctx, k)
			p.PExpire(ctx, k, s.opt.Window)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("counting an account made: %w", err)
	}
	return nil
}

// keys are the window's counts of the address and of its network, and
// the time left in the window.
func (s *Signups) keys(addr netip.Addr) ([]string, time.Duration) {
	now := time.Now()
	w := s.opt.Window
	n := now.UnixMilli() / w.Milliseconds()
	left := time.UnixMilli((n + 1) * w.Milliseconds()).Sub(now)
	suffix := ":" + strconv.FormatInt(n, 10)
	return []string{"seckill:signups:addr:" + addr.Unmap().String() + suffix, "seckill:signups:net:" + admission.Network(addr) + suffix}, left
}
