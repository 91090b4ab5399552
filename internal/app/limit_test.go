package app

import "testing"

// The concurrency limit is on unless turned off: what the public reaches
// is limited by default, and CONCURRENCY_LIMIT=0 or the flag's 0 turns it off.
// The limit is off unless asked for: in the opening herd measured on one
// machine (docs/BENCHMARKS.md) it shed purchases the service could sell.
func TestConcurrencyLimitIsOffByDefault(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want int
	}{
		{"nothing set", nil, nil, 0},
		{"the environment's 200", nil, map[string]string{"CONCURRENCY_LIMIT": "200"}, 200},
		{"the flag's 50 over the environment's 0", []string{"-concurrency-limit", "50"}, map[string]string{"CONCURRENCY_LIMIT": "0"}, 50},
	} {
		cfg, _, err := ParseConfig("seckill", c.args, func(k string) string { return c.env[k] })
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cfg.ConcurrencyLimit != c.want {
			t.Errorf("%s: the limit's ceiling is %d, want %d", c.name, cfg.ConcurrencyLimit, c.want)
		}
	}
	if _, _, err := ParseConfig("seckill", []string{"-concurrency-limit", "-1"}, func(string) string { return "" }); err == nil {
		t.Error("a negative ceiling was taken")
	}
}
