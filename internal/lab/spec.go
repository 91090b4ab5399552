package lab

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"seckill/internal/harness"
	"seckill/internal/lock"
	"seckill/internal/stock"
)

// Spec is the body of POST /api/runs. A zero field takes its default.
type Spec struct {
	// Lock is the lock strategy's name. Default: "token".
	Lock string `json:"lock"`
	// Mode is the stock mode: rmw, lua or db. Default: "rmw".
	Mode string `json:"mode"`
	// Shards is the number of stock keys, 1–64. Default: 5.
	Shards int `json:"shards"`
	// Stock is the initial stock, 1–MaxStock. Default: 100.
	Stock int `json:"stock"`
	// Buyers is the number of distinct users, 1–MaxBuyers. Default: 1000.
	Buyers int `json:"buyers"`
	// Requests is the number of order requests, 1–MaxRequests; beyond
	// Buyers, users repeat and are told "already bought". Default: Buyers.
	Requests int `json:"requests"`
	// Concurrency is the number of requests in flight, 1–MaxConcurrency.
	// Default: 64.
	Concurrency int `json:"concurrency"`
	// HoldMS is a pause inside the critical section, 0–MaxHoldMS. It widens
	// the race window so that a flawed lock shows its flaw on every run.
	// Default: 0.
	HoldMS int `json:"hold_ms"`
	// Fault is a failure injected by the lock ladder: one of Faults.
	// Default: "none".
	Fault string `json:"fault"`
	// FaultRequests applies the fault to the first this many requests only,
	// so that the rest show whether the lock recovers. Default: 0, every
	// request.
	FaultRequests int `json:"fault_requests,omitempty"`
}

// Bounds of a Spec: one run must not take the machine from the service.
const (
	MaxStock       = 10_000
	MaxBuyers      = 20_000
	MaxRequests    = 20_000
	MaxConcurrency = 256
	MaxHoldMS      = 2_000
)

// Defaults of a Spec.
const (
	DefaultLock        = "token"
	DefaultMode        = "rmw"
	DefaultShards      = 5
	DefaultStock       = 100
	DefaultBuyers      = 1000
	DefaultConcurrency = 64
)

// Faults are the fault names a run accepts, "none" first; Spec.harness
// turns each into the order request's fault fields.
var Faults = []string{"none", "abandon", "crash-before-expire", "clock-skew"}

// ClockSkew is how far ahead the clock-skew fault sets the faulty requests'
// clocks: past any lock TTL the service would be given, so that a skewed
// client judges every live lock expired.
const ClockSkew = time.Minute

// Modes are the stock modes a run accepts.
var Modes = harness.Modes

// check applies the defaults and the bounds, naming the first field that
// is wrong and why.
func (s Spec) check() (Spec, error) {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	if s.Lock == "" {
		s.Lock = DefaultLock
	}
	if s.Mode == "" {
		s.Mode = DefaultMode
	}
	if s.Fault == "" {
		s.Fault = Faults[0]
	}
	def(&s.Shards, DefaultShards)
	def(&s.Stock, DefaultStock)
	def(&s.Buyers, DefaultBuyers)
	def(&s.Requests, s.Buyers)
	def(&s.Concurrency, DefaultConcurrency)

	if _, err := lock.Lookup(s.Lock); err != nil {
		return s, fmt.Errorf("lock: %q is not a registered strategy (GET /api/locks lists them)", s.Lock)
	}
	if !slices.Contains(Modes, s.Mode) {
		return s, fmt.Errorf("mode: %q is not one of %s", s.Mode, strings.Join(Modes, ", "))
	}
	if !slices.Contains(Faults, s.Fault) {
		return s, fmt.Errorf("fault: %q is not one of %s", s.Fault, strings.Join(Faults, ", "))
	}
	for _, b := range []struct {
		name      string
		v, lo, hi int
	}{
		{"shards", s.Shards, 1, stock.MaxShards},
		{"stock", s.Stock, 1, MaxStock},
		{"buyers", s.Buyers, 1, MaxBuyers},
		{"requests", s.Requests, 1, MaxRequests},
		{"concurrency", s.Concurrency, 1, MaxConcurrency},
		{"hold_ms", s.HoldMS, 0, MaxHoldMS},
		{"fault_requests", s.FaultRequests, 0, s.Requests},
	} {
		if b.v < b.lo || b.v > b.hi {
			return s, fmt.Errorf("%s: %d is out of range; it must be between %d and %d", b.name, b.v, b.lo, b.hi)
		}
	}
	return s, nil
}

// harness turns a checked Spec into the harness's, aimed at target.
func (s Spec) harness(target string, product, users int64, timeout time.Duration) harness.Spec {
	h := harness.Spec{
		Targets: []string{target}, ProductID: product,
		Stock: s.Stock, Shards: s.Shards,
		Buyers: s.Buyers, UserBase: users, Requests: s.Requests, Concurrency: s.Concurrency,
		Timeout: harness.Duration(timeout),
		Lock:    s.Lock, Mode: s.Mode, Hold: harness.Duration(time.Duration(s.HoldMS) * time.Millisecond),
		FaultRequests: s.FaultRequests,
	}
	switch s.Fault {
	case "abandon":
		h.Abandon = true
	case "crash-before-expire":
		h.CrashBeforeExpire = true
	case "clock-skew":
		h.ClockSkew = harness.Duration(ClockSkew)
	}
	return h
}
