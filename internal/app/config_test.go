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

// TestConnectionSettings: the connection limits' defaults are the ones the
// hardening chose (issue 36, finding 4), and a timeout that is not
// positive is refused: net/http reads zero as no timeout at all, and a
// connection that sends nothing would be held for ever (a negative
// duration is refused by every duration flag).
func TestConnectionSettings(t *testing.T) {
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	c, _, err := app.ParseConfig("seckill", nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.HeaderTimeout != 3*time.Second || c.IdleTimeout != 30*time.Second || c.AddressConns != 512 || c.MaxConns <= 0 {
		t.Errorf("defaults: header %s, idle %s, per address %d, in all %d; want 3s, 30s, 512 and half the open-file limit",
			c.HeaderTimeout, c.IdleTimeout, c.AddressConns, c.MaxConns)
	}
	if c, _, err := app.ParseConfig("seckill", nil, env(map[string]string{"IDLE_TIMEOUT": "5s", "ADDRESS_CONNS": "0"})); err != nil || c.IdleTimeout != 5*time.Second || c.AddressConns != 0 {
		t.Errorf("IDLE_TIMEOUT=5s ADDRESS_CONNS=0: %s %d %v", c.IdleTimeout, c.AddressConns, err)
	}
	for _, args := range [][]string{{"-header-timeout", "0s"}, {"-header-timeout", "-1s"}, {"-idle-timeout", "-30s"}, {"-address-conns", "-1"}, {"-max-conns", "-1"}} {
		if _, _, err := app.ParseConfig("seckill", args, env(nil)); err == nil {
			t.Errorf("%v was taken", args)
		}
	}
}

// TestRelyingPartySettings: the passkeys' relying party defaults to
// localhost (an IP address is no relying party id to a browser) or the
// listen address's name, on the listen port; RP_ID and RP_ORIGINS name
// others, the flag over the environment.
func TestRelyingPartySettings(t *testing.T) {
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	for _, tc := range []struct {
		args    []string
		vars    map[string]string
		id      string
		origins string
	}{
		{nil, nil, "localhost", "http://localhost:8080"},
		{[]string{"-addr", "0.0.0.0:9000"}, nil, "localhost", "http://localhost:9000"},
		{[]string{"-addr", "shop.test:8443"}, nil, "shop.test", "http://shop.test:8443"},
		{nil, map[string]string{"RP_ID": "shop.example", "RP_ORIGINS": "https://shop.example, https://www.shop.example"}, "shop.example", "https://shop.example,https://www.shop.example"},
		{[]string{"-rp-id", "flag.example"}, map[string]string{"RP_ID": "env.example"}, "flag.example", "http://flag.example:8080"},
	} {
		c, _, err := app.ParseConfig("seckill", tc.args, env(tc.vars))
		if err != nil {
			t.Fatalf("%q %v: %v", tc.args, tc.vars, err)
		}
		if id, origins := c.RelyingParty(); id != tc.id || strings.Join(origins, ",") != tc.origins {
			t.Errorf("%q %v: relying party %q %q, want %q %q", tc.args, tc.vars, id, origins, tc.id, tc.origins)
		}
	}
}
