package app_test

import (
	"strings"
	"testing"
	"time"

	"seckill/internal/app"
	"seckill/internal/session"
)

// TestSessionSettings: SESSION_SECRET shorter than HS256 wants is refused at
// start, the flag wins over the environment, and the lifetime defaults to
// session.DefaultLifetime.
func TestSessionSettings(t *testing.T) {
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	if _, _, err := app.ParseConfig("seckill", nil, env(map[string]string{"SESSION_SECRET": "short"})); err == nil || !strings.Contains(err.Error(), "session-secret") {
		t.Errorf("a 5-byte SESSION_SECRET: %v, want it refused", err)
	}
	long := strings.Repeat("s", session.MinSecret)
	c, _, err := app.ParseConfig("seckill", []string{"-session-secret", long + "!"}, env(map[string]string{"SESSION_SECRET": long}))
	if err != nil || c.SessionSecret != long+"!" || c.SessionLifetime != session.DefaultLifetime {
		t.Errorf("config %q %s %v, want the flag's secret and the default lifetime", c.SessionSecret, c.SessionLifetime, err)
	}
	if s := c.String(); strings.Contains(s, long) {
		t.Errorf("the start-up line shows the secret: %s", s)
	}
	if c, _, err := app.ParseConfig("seckill", nil, env(map[string]string{"SESSION_LIFETIME": "15m"})); err != nil || c.SessionLifetime != 15*time.Minute {
		t.Errorf("SESSION_LIFETIME=15m: %s %v", c.SessionLifetime, err)
	}
	if _, _, err := app.ParseConfig("seckill", []string{"-session-lifetime", "0s"}, env(nil)); err == nil {
		t.Error("a lifetime of 0 was taken")
	}
}
