package app_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"seckill/internal/app"
	"seckill/internal/session"
	"seckill/internal/testkit/testenv"
)

// A Redis restarted empty splits no secret (issue 36, finding 8): two
// instances run on one Redis and one database, the Redis is wiped, a third
// starts; all three accept the same buyer's token and the same operator
// token, and only that one. The Redis is the first instance's embedded
// one, the test's own, whatever REDIS_ADDR says.
func TestSecretsSurviveARedisWipe(t *testing.T) {
	cfg := testenv.Config(t)
	cfg.RedisAddr, cfg.AdminToken, cfg.SessionSecret = "", "", ""
	if cfg.MySQLDSN == "" {
		cfg.SQLitePath = filepath.Join(t.TempDir(), "shop.db")
	}
	first := testenv.Start(t, cfg, app.Extras{})
	cfg.RedisAddr = first.RedisAddr()
	second := testenv.Start(t, cfg, app.Extras{})

	buyer := signIn(t, first.URL, "dora")
	rdb := redis.NewClient(&redis.Options{Addr: first.RedisAddr()})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	third := testenv.Start(t, cfg, app.Extras{})

	op := first.Config.AdminToken
	for i, s := range []*app.Server{first, second, third} {
		if s.Config.AdminToken != op {
			t.Errorf("instance %d has operator token %q, the first %q", i+1, s.Config.AdminToken, op)
		}
		if st := get(t, s.URL+"/api/orders/1", buyer); st != http.StatusNotFound {
			t.Errorf("instance %d: the buyer's token read a missing order: %d, want 404 (401: the token refused)", i+1, st)
		}
		for _, token := range []string{op, second.Config.AdminToken, third.Config.AdminToken} {
			if st := post(t, s.URL+"/api/products/1/reconcile", token); st == http.StatusUnauthorized {
				t.Errorf("instance %d refused the operator token %q", i+1, token)
			}
		}
		if st := post(t, s.URL+"/api/products/1/reconcile", "not-"+op); st != http.StatusUnauthorized {
			t.Errorf("instance %d took another operator token: %d", i+1, st)
		}
	}
	if got, err := rdb.Get(t.Context(), app.OperatorTokenKey).Result(); err != nil || got != op {
		t.Errorf("Redis's copy of the operator token after the third start: %q %v, want %q", got, err, op)
	}

	// Configured values still win.
	cfg.AdminToken, cfg.SessionSecret = "configured-operator-token", strings.Repeat("k", 32)
	if fourth := testenv.Start(t, cfg, app.Extras{}); fourth.Config.AdminToken != "configured-operator-token" {
		t.Errorf("ADMIN_TOKEN set: the instance uses %q", fourth.Config.AdminToken)
	} else if st := get(t, fourth.URL+"/api/orders/1", buyer); st != http.StatusUnauthorized {
		t.Errorf("SESSION_SECRET set to another key: a token signed with the kept one got %d, want 401", st)
	}
}

// Secrets an earlier version kept in Redis alone are adopted, not
// replaced: the instances of that version still running hold them in
// memory, so the first start on a database without the secrets' rows
// stores Redis's values there, and a start after a wipe of that Redis
// still uses them. Replacing them would split the fleet during the
// upgrade as finding 8's wipe did. The database is the test's own SQLite
// whatever MYSQL_DSN says: a shared one may hold the rows already.
func TestSecretsKeptInRedisByAnEarlierVersionAreAdopted(t *testing.T) {
	mr := miniredis.RunT(t)
	oldKey := strings.Repeat("s", session.SecretBytes)
	mr.Set(app.OperatorTokenKey, "the-earlier-operator-token")
	mr.Set(session.SecretKey, oldKey)

	cfg := testenv.Config(t)
	cfg.RedisAddr, cfg.AdminToken, cfg.SessionSecret = mr.Addr(), "", ""
	cfg.MySQLDSN, cfg.SQLitePath = "", filepath.Join(t.TempDir(), "shop.db")
	earlier, err := session.NewKeys(session.Options{Secret: []byte(oldKey)})
	if err != nil {
		t.Fatal(err)
	}
	check := func(s *app.Server, when string) {
		t.Helper()
		if s.Config.AdminToken != "the-earlier-operator-token" {
			t.Errorf("%s: the operator token is %q, want the one Redis kept", when, s.Config.AdminToken)
		}
		if _, err := earlier.Parse(signIn(t, s.URL, "dora")); err != nil {
			t.Errorf("%s: a token the instance signed is not signed with the key Redis kept: %v", when, err)
		}
	}
	check(testenv.Start(t, cfg, app.Extras{}), "first start")
	mr.FlushAll()
	check(testenv.Start(t, cfg, app.Extras{}), "a start after Redis was wiped")
	if got, _ := mr.Get(app.OperatorTokenKey); got != "the-earlier-operator-token" {
		t.Errorf("Redis's copy after the second start: %q", got)
	}
}

func signIn(t *testing.T, url, name string) string {
	t.Helper()
	resp, err := http.Post(url+"/api/sessions", "application/json", strings.NewReader(`{"name":"`+name+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct{ Token string }
	if err := decodeJSON(resp, &s); err != nil || s.Token == "" {
		t.Fatalf("signing in %s: %d %v", name, resp.StatusCode, err)
	}
	return s.Token
}

func get(t *testing.T, url, token string) int { return send(t, http.MethodGet, url, token) }

func post(t *testing.T, url, token string) int { return send(t, http.MethodPost, url, token) }

func send(t *testing.T, method, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func decodeJSON(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }
