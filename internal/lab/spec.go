package lab

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"seckill/internal/api"
	"seckill/internal/lab/harness"
	"seckill/internal/lock"
	"seckill/internal/order"
)

// ClockSkew is how far ahead the clock-skew fault sets the faulty requests'
// clocks: past any lock TTL the service would be given, so that a skewed
// client judges every live lock expired.
const ClockSkew = time.Minute

// check applies the defaults and the bounds, naming the first field that
// is wrong and why.
func check(s api.RunSpec) (api.RunSpec, error) {
	s = s.WithDefaults()
	invalid := func(format string, a ...any) (api.RunSpec, error) {
		return s, fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	if _, err := lock.Lookup(s.Lock); err != nil {
		return invalid("lock: %q is not a registered strategy (GET /api/locks lists them)", s.Lock)
	}
	if modes := order.ModeNames(); !slices.Contains(modes, s.Mode) {
		return invalid("mode: %q is not one of %s", s.Mode, strings.Join(modes, ", "))
	}
	if faults := api.Faults(); !slices.Contains(faults, s.Fault) {
		return invalid("fault: %q is not one of %s", s.Fault, strings.Join(faults, ", "))
	}
	if len(s.Seat) > api.MaxSeatLen || strings.ContainsFunc(s.Seat, func(r rune) bool {
		return r != '-' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z')
	}) {
		return invalid("seat: %q is not up to %d letters, digits and dashes", s.Seat, api.MaxSeatLen)
	}
	s.Student = strings.TrimSpace(s.Student)
	if utf8.RuneCountInString(s.Student) > api.MaxStudentLen || !utf8.ValidString(s.Student) || strings.ContainsFunc(s.Student, unicode.IsControl) {
		return invalid("student: a name of up to %d characters, without control characters", api.MaxStudentLen)
	}
	for _, b := range []struct {
		name      string
		v, lo, hi int
	}{
		{"shards", s.Shards, 1, api.MaxShards},
		{"stock", s.Stock, 1, api.MaxRunStock},
		{"buyers", s.Buyers, 1, api.MaxRunBuyers},
		{"requests", s.Requests, 1, api.MaxRunRequests},
		{"concurrency", s.Concurrency, 1, api.MaxRunConcurrency},
		{"hold_ms", s.HoldMS, 0, api.MaxRunHoldMS},
		{"fault_requests", s.FaultRequests, 0, s.Requests},
	} {
		if b.v < b.lo || b.v > b.hi {
			return invalid("%s: %d is out of range; it must be between %d and %d", b.name, b.v, b.lo, b.hi)
		}
	}
	return s, nil
}

// toHarness turns a checked spec into the harness's, aimed at target.
func toHarness(s api.RunSpec, target string, product, users int64, timeout time.Duration) harness.Spec {
	h := harness.Spec{
		Targets: []string{target}, ProductID: product,
		Stock: s.Stock, Shards: s.Shards,
		Buyers: s.Buyers, UserBase: users, Requests: s.Requests, Concurrency: s.Concurrency,
		Timeout: harness.Duration(timeout),
		Lock:    s.Lock, Mode: s.Mode, Hold: harness.Duration(time.Duration(s.HoldMS) * time.Millisecond),
		FaultRequests: s.FaultRequests,
	}
	switch s.Fault {
	case api.FaultAbandon:
		h.Abandon = true
	case api.FaultCrashBeforeExpire:
		h.CrashBeforeExpire = true
	case api.FaultClockSkew:
		h.ClockSkew = harness.Duration(ClockSkew)
	case api.FaultReleaseBeforeCommit:
		h.ReleaseBeforeCommit = true
	case api.FaultCrashAfterTake:
		h.CrashAfterTake = true
	case api.FaultPoison:
		h.Poison = true
	}
	return h
}
