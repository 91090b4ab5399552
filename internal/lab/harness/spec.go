// Package harness drives the order service with many concurrent buyers and
// judges the outcome: it resets a product, sends a bounded workload of order
// requests, then compares what it counted (201s, sold-outs, errors) with the
// service's own audit of orders against stock. The command loadtest and the
// web page both run it; it speaks to the service only over HTTP, so it can
// drive one in-process instance, several processes, or a remote deployment.
package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"seckill/internal/api"
)

// ErrSpec wraps every error caused by an invalid Spec.
var ErrSpec = errors.New("harness: invalid spec")

// Duration is a time.Duration that reads and writes JSON as a Go duration
// string ("1.5s", "200ms"), which people can type and the page can show.
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"1.5s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Spec is one run: the product to reset, the workload to send and the
// service fields to send with it. The zero value of a field means its
// default, applied by Run.
type Spec struct {
	// Targets are the service base URLs ("http://127.0.0.1:8080"); order
	// requests go to them in turn. Required.
	Targets []string `json:"targets"`

	// ProductID is the product reset and bought. Default: 1.
	ProductID int64 `json:"product_id,omitempty"`
	// Stock is the initial stock. Default: 100.
	Stock int `json:"stock,omitempty"`
	// Shards is the number of stock keys. Default: the service's (5).
	Shards int `json:"shards,omitempty"`
	// Fallback: when a buyer's shard is empty, try the others. Default: the
	// service's (true).
	Fallback *bool `json:"fallback,omitempty"`

	// Buyers is the number of distinct users; request i is sent by user
	// UserBase+1+i%Buyers, so requests beyond Buyers repeat users and draw
	// "already_bought". Default: 1000.
	Buyers int `json:"buyers,omitempty"`
	// Signed, when set, are signed-in buyers: request i is sent by
	// Signed[i%len(Signed)], with Authorization: Bearer <its token> and a
	// body that names the product only (no user_id, which would stand for
	// the token, and no lab option, which a product that is not a lab
	// product refuses). Buyers is then len(Signed), and no fault applies.
	Signed []api.Session `json:"-"`
	// UserBase offsets the user ids. Default: drawn at random per run, from
	// 2^40 to 2^52, so that no two runs share a buyer: the service limits
	// each user's order rate and remembers who bought.
	UserBase int64 `json:"user_base,omitempty"`
	// Requests bounds the number of order requests. Default: Buyers in a
	// closed loop; Rate×Duration in an open loop.
	Requests int `json:"requests,omitempty"`
	// Concurrency is the number of workers, hence the most requests in
	// flight. Default: 100.
	Concurrency int `json:"concurrency,omitempty"`
	// Rate, when positive, makes the run an open loop: request i is due at
	// start + i/Rate whatever the service's speed, and its latency counts
	// from that instant, so a slow service is not hidden by the harness
	// waiting for it (no coordinated omission). Requests per second.
	Rate float64 `json:"rate,omitempty"`
	// Duration bounds the run's length: an open loop sends Rate×Duration
	// requests; a closed loop stops sending when it passes. Default: 10s
	// for an open loop, none for a closed one.
	Duration Duration `json:"duration,omitempty"`
	// Timeout is a hard bound on the reset and the load; requests still in
	// flight then are cancelled and counted as errors, and the audit that
	// follows gets 10s of its own. Default: 60s.
	Timeout Duration `json:"timeout,omitempty"`

	// Lock is the lock strategy's name. Default: api.DefaultLock.
	Lock string `json:"lock,omitempty"`
	// Mode is one of the service's sale modes (GET /api/modes). Default: api.DefaultMode.
	Mode string `json:"mode,omitempty"`
	// Hold is a pause inside the critical section (sent as hold_ms).
	Hold Duration `json:"hold,omitempty"`

	// Abandon: the lock holder never releases (fault option of the ladder).
	Abandon bool `json:"abandon,omitempty"`
	// CrashBeforeExpire: the holder crashes before its lease expires.
	CrashBeforeExpire bool `json:"crash_before_expire,omitempty"`
	// ClockSkew skews the holder's clock (sent as clock_skew_ms).
	ClockSkew Duration `json:"clock_skew,omitempty"`
	// ReleaseBeforeCommit: the sqlrmw mode's holder releases its lock
	// before the COMMIT, and spends its hold between the two.
	ReleaseBeforeCommit bool `json:"release_before_commit,omitempty"`
	// FaultRequests applies the fault options above to the first this many
	// requests only, sent one at a time before all the others, so that the
	// rest show how the lock recovers. Default: 0, every request.
	FaultRequests int `json:"fault_requests,omitempty"`

	// CrashAfterTake stops the faulty purchases between the take and the
	// order (the mq mode: the publish), as a process that died there would.
	CrashAfterTake bool `json:"crash_after_take,omitempty"`
	// Poison queues the faulty purchases' async orders with rows the
	// database refuses: they go to the dead letters.
	Poison bool `json:"poison,omitempty"`

	// PayTimeout, when set, gives the product a payment window and makes
	// the run the pay-vs-timeout race: after the purchases, each order is
	// paid at its due_at plus a jitter within ±PayJitter, while the
	// service's delay queue cancels the unpaid ones at the same instants.
	PayTimeout Duration `json:"pay_timeout,omitempty"`
	PayJitter  Duration `json:"pay_jitter,omitempty"`
	// Lifecycle is the product's: "conditional" (the service's default) or
	// "naive", which loses the race.
	Lifecycle string `json:"lifecycle,omitempty"`

	// AdminToken is sent as a bearer token with the product reset and the
	// reconciler's pass.
	AdminToken string `json:"-"`

	// Midway, when not nil, is called once MidwayAfter requests have been
	// answered, while the load goes on: a fault the runner strikes in the
	// middle of the run (see Fault). The run waits for it before the audit.
	Midway      func(context.Context) error `json:"-"`
	MidwayAfter int                         `json:"-"`
	// MidwayTarget, when not nil, makes MidwayAfter count the answers of
	// Targets[*MidwayTarget] only. Default: every target's.
	MidwayTarget *int `json:"-"`
	// CheckAccepted keeps the ids of the orders answered 202 and, once the
	// queue has drained, asks the service which reached the table (POST
	// /api/orders/lookup): a 202 whose order is not there is lost (LOST),
	// whatever the audit of what Redis still holds says.
	CheckAccepted bool `json:"-"`
	// Reconcile runs the reconciler on the first target after the load,
	// until no take is left pending, before the audit: the units of
	// purchases that died between their take and their order go back.
	Reconcile bool `json:"-"`
}

// Defaults applied by Run.
const (
	DefaultStock       = 100
	DefaultBuyers      = 1000
	DefaultConcurrency = 100
	DefaultTimeout     = 60 * time.Second
	DefaultOpenLoop    = 10 * time.Second
)

// withDefaults returns s with its zero fields set and checks it.
func (s Spec) withDefaults() (Spec, error) {
	if len(s.Targets) == 0 {
		return s, fmt.Errorf("%w: no target", ErrSpec)
	}
	targets := make([]string, len(s.Targets))
	for i, t := range s.Targets {
		if !strings.HasPrefix(t, "http://") && !strings.HasPrefix(t, "https://") {
			return s, fmt.Errorf("%w: target %q is not an http(s) URL", ErrSpec, t)
		}
		targets[i] = strings.TrimRight(t, "/")
	}
	s.Targets = targets
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	if s.ProductID == 0 {
		s.ProductID = 1
	}
	if s.UserBase == 0 {
		s.UserBase = freshUserBase()
	}
	def(&s.Stock, DefaultStock)
	if len(s.Signed) > 0 {
		if s.Buyers != 0 && s.Buyers != len(s.Signed) || s.hasFaults() {
			return s, fmt.Errorf("%w: signed-in buyers are the run's buyers, with no fault", ErrSpec)
		}
		s.Buyers = len(s.Signed)
	}
	def(&s.Buyers, DefaultBuyers)
	def(&s.Concurrency, DefaultConcurrency)
	if s.Lock == "" {
		s.Lock = api.DefaultLock
	}
	if s.Mode == "" {
		s.Mode = api.DefaultMode
	}
	if s.Timeout == 0 {
		s.Timeout = Duration(DefaultTimeout)
	}
	if s.Rate > 0 {
		if s.Duration == 0 {
			s.Duration = Duration(DefaultOpenLoop)
		}
		n := int(s.Rate * time.Duration(s.Duration).Seconds())
		if s.Requests == 0 || n < s.Requests {
			s.Requests = n
		}
	}
	def(&s.Requests, s.Buyers)
	switch {
	case s.ProductID < 0, s.Stock < 0, s.Shards < 0, s.Buyers < 0, s.Requests < 0,
		s.Concurrency < 0, s.Rate < 0, s.Duration < 0, s.Timeout < 0, s.Hold < 0,
		s.FaultRequests < 0, s.UserBase < 0:
		return s, fmt.Errorf("%w: negative value", ErrSpec)
	case s.Requests == 0:
		return s, fmt.Errorf("%w: the run would send no request", ErrSpec)
	}
	return s, nil
}

// User ids of the runs that draw their own lie in [userBaseMin, 2^52+buyers):
// above the lab's (10^9 on), below 2^53, where a JavaScript number still
// holds them exactly.
const (
	userBaseMin  = 1 << 40
	userBaseSpan = 1<<52 - userBaseMin
)

// freshUserBase draws a user base at random, so that two runs share a buyer
// only by a chance of about buyers/2^52.
func freshUserBase() int64 { return userBaseMin + rand.Int64N(userBaseSpan) }

// faulty reports whether request i carries the fault options.
func (s Spec) faulty(i int) bool {
	return s.FaultRequests == 0 || i < s.FaultRequests
}

// hasFaults reports whether any fault option is set.
func (s Spec) hasFaults() bool {
	return s.Abandon || s.CrashBeforeExpire || s.ClockSkew != 0 || s.ReleaseBeforeCommit || s.CrashAfterTake || s.Poison
}

// fault names the run's fault, "" for none.
func (s Spec) fault() string {
	switch {
	case s.Abandon:
		return api.FaultAbandon
	case s.CrashBeforeExpire:
		return api.FaultCrashBeforeExpire
	case s.ClockSkew != 0:
		return api.FaultClockSkew
	case s.ReleaseBeforeCommit:
		return api.FaultReleaseBeforeCommit
	case s.CrashAfterTake:
		return api.FaultCrashAfterTake
	case s.Poison:
		return api.FaultPoison
	}
	return ""
}
