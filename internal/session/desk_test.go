package session_test

import (
	"context"
	"crypto/rand"
	"errors"
	mrand "math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"seckill/internal/api"
	"seckill/internal/session"
	"seckill/internal/testkit/testenv"
)

// backends are a Redis and a database for desks: REDIS_ADDR's and
// MYSQL_DSN's when set (a database of the test's own; keys the test's own
// by their random names and ids), else miniredis and SQLite.
func backends(t testing.TB) (redis.UniversalClient, *gorm.DB) {
	r, db, _ := backendsClock(t)
	return r, db
}

// backendsClock is backends with the miniredis whose clock a test moves
// (nil on a real Redis, whose clock moves by itself).
func backendsClock(t testing.TB) (redis.UniversalClient, *gorm.DB, *miniredis.Miniredis) {
	t.Helper()
	rdb, db, mr := testenv.Local(t)
	var r redis.UniversalClient = rdb
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		real := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { real.Close() })
		r, mr = real, nil
	}
	if dsn := os.Getenv("MYSQL_DSN"); dsn != "" {
		// MySQL's collation and its duplicate-key clause are what matter.
		var err error
		if db, err = gorm.Open(mysql.Open(testenv.Database(t, dsn)), &gorm.Config{Logger: logger.Discard}); err != nil {
			t.Fatal(err)
		}
		if sqlDB, err := db.DB(); err == nil {
			t.Cleanup(func() { sqlDB.Close() })
		}
	}
	if err := session.Migrate(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	return r, db, mr
}

// desk is a desk on rdb and db, as an instance would build it.
func desk(t testing.TB, rdb redis.UniversalClient, db *gorm.DB, demo bool) *session.Desk {
	t.Helper()
	return session.NewDesk(session.DeskOptions{Keys: keys(t, secret, nil), Accounts: session.NewAccounts(db), Redis: rdb, Demo: demo})
}

// unique is a name no other test run uses, on a shared Redis.
func unique(prefix string) string { return prefix + "-" + strings.ToLower(rand.Text()[:10]) }

const password = "a long passphrase of my own 7"

// TestANameIsOneBuyer: the same name, in any case and however many sign in
// with it at once, is one buyer, with an id in the named buyers' range.
func TestANameIsOneBuyer(t *testing.T) {
	rdb, db := backends(t)
	d := desk(t, rdb, db, true)
	name := unique("Alice")
	ids := make([]int64, 8)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range ids {
		wg.Go(func() {
			<-gate
			spelled := name
			if i%2 == 1 {
				spelled = " " + strings.ToLower(name) + " "
			}
			tok, err := d.SignIn(t.Context(), "127.0.0.1", spelled, "")
			if err != nil {
				t.Error(err)
			}
			ids[i] = tok.Buyer
		})
	}
	close(gate)
	wg.Wait()
	for i, id := range ids {
		if id != ids[0] || id < api.FirstNamedBuyer {
			t.Fatalf("sign-in %d: buyer %d, want %d for every one, at least %d", i, id, ids[0], api.FirstNamedBuyer)
		}
	}
	bob, err := d.SignIn(t.Context(), "127.0.0.1", unique("bob"), "")
	if err != nil || bob.Buyer == ids[0] {
		t.Errorf("bob: %+v %v, want another buyer", bob, err)
	}
	if _, err := d.SignIn(t.Context(), "127.0.0.1", "\x00", ""); !errors.Is(err, session.ErrBadName) {
		t.Errorf("a NUL name: %v, want ErrBadName", err)
	}
	if err := session.Migrate(t.Context(), db); err != nil {
		t.Errorf("migrating again: %v", err)
	}
}

// TestBuyerIDsAreNotACounter (finding 10): ids of accounts made one after
// another are not consecutive, nor in the order they were made, so an id
// tells neither how many buyers there are nor another's id.
func TestBuyerIDsAreNotACounter(t *testing.T) {
	rdb, db := backends(t)
	d := desk(t, rdb, db, true)
	var ids []int64
	for range 20 {
		tok, err := d.SignIn(t.Context(), "127.0.0.1", unique("n"), "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tok.Buyer)
	}
	for i := 1; i < len(ids); i++ {
		if d := ids[i] - ids[i-1]; d > 0 && d < 1000 {
			t.Errorf("account %d's id %d is %d past the one made before it: a counter", i, ids[i], d)
		}
	}
	if slices.IsSorted(ids) {
		t.Errorf("20 ids in the order they were made: %v", ids)
	}
}

// TestPasswordGuardsTheAccount (finding 1): once an account has a
// password, its name alone signs nobody in, in any spelling, even with the
// demo sign-in on; a wrong password and an unknown name are the same
// refusal; the right password signs in and shows the name as typed.
func TestPasswordGuardsTheAccount(t *testing.T) {
	rdb, db := backends(t)
	d := desk(t, rdb, db, true)
	name := unique("dora")
	dora, err := d.Create(t.Context(), name, password)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Create(t.Context(), strings.ToUpper(name), password+"x"); !errors.Is(err, session.ErrNameTaken) {
		t.Errorf("the name again in capitals: %v, want ErrNameTaken", err)
	}
	for what, try := range map[string][2]string{
		"the name alone":               {name, ""},
		"the name spelled otherwise":   {"  " + strings.ToUpper(name) + " ", ""},
		"a wrong password":             {name, password + "!"},
		"an unknown name":              {unique("nobody"), password},
		"an unknown name, no password": {unique("nobody") + "x", "x"},
	} {
		tok, err := d.SignIn(t.Context(), "10.0.0.1", try[0], try[1])
		if !errors.Is(err, session.ErrBadCredentials) || tok.Token != "" {
			t.Errorf("%s: %+v %v, want ErrBadCredentials and no token", what, tok, err)
		}
	}
	spelled := " " + strings.ToUpper(name)
	tok, err := d.SignIn(t.Context(), "10.0.0.1", spelled, password)
	if err != nil || tok.Buyer != dora.ID {
		t.Fatalf("the right password: %+v %v, want buyer %d", tok, err, dora.ID)
	}
	if tok.Name != strings.TrimSpace(spelled) {
		t.Errorf("the session shows %q, want the name as typed this time (%q), not the account's first spelling", tok.Name, strings.TrimSpace(spelled))
	}
	if b, err := d.Verify(t.Context(), tok.Token); err != nil || b.ID != dora.ID || b.Created.IsZero() {
		t.Errorf("verifying her token: %+v %v", b, err)
	}
	off := desk(t, rdb, db, false)
	if _, err := off.SignIn(t.Context(), "10.0.0.1", unique("eve"), ""); !errors.Is(err, session.ErrBadCredentials) {
		t.Errorf("a demo sign-in with demo accounts off: %v, want ErrBadCredentials", err)
	}
}

// TestWeakPasswordsAreRefused: short, common (also dressed up), repeated,
// or holding the name.
func TestWeakPasswordsAreRefused(t *testing.T) {
	for _, pw := range []string{"", "short", strings.Repeat("a", session.MinPassword), "password1234567", "Password123456!!",
		"qwertyqwertyqwerty", "correct horse battery staple", "abcabcabcabcabcabc", "i am dora the explorer", strings.Repeat("x", session.MaxPassword+1)} {
		if err := session.CheckPassword("Dora", pw); !errors.Is(err, session.ErrWeakPassword) {
			t.Errorf("CheckPassword(%q): %v, want ErrWeakPassword", pw, err)
		}
	}
	for _, pw := range []string{password, "vert-lagon-pivoine-31", "Zürich ist schön im Mai"} {
		if err := session.CheckPassword("Dora", pw); err != nil {
			t.Errorf("CheckPassword(%q): %v, want it taken", pw, err)
		}
	}
}

// TestSessionsEndEverywhere: logging out on one instance, or changing the
// password on one, ends the session on another sharing Redis and the
// database, at once (no cache to wait for).
func TestSessionsEndEverywhere(t *testing.T) {
	rdb, db := backends(t)
	one, two := desk(t, rdb, db, false), desk(t, rdb, db, false)
	name := unique("frank")
	if _, err := one.Create(t.Context(), name, password); err != nil {
		t.Fatal(err)
	}
	signIn := func(pw string) string {
		t.Helper()
		tok, err := one.SignIn(t.Context(), "10.0.0.2", name, pw)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := two.Verify(t.Context(), tok.Token); err != nil {
			t.Fatalf("a fresh token on the other instance: %v", err)
		}
		return tok.Token
	}
	out, kept := signIn(password), signIn(password)
	if err := one.SignOut(t.Context(), out); err != nil {
		t.Fatal(err)
	}
	if _, err := two.Verify(t.Context(), out); !errors.Is(err, session.ErrInvalid) {
		t.Errorf("a logged-out token on the other instance: %v, want ErrInvalid", err)
	}
	if _, err := two.Verify(t.Context(), kept); err != nil {
		t.Errorf("another session of the account after a logout: %v, want it open", err)
	}
	fresh := password + " and more"
	if err := one.ChangePassword(t.Context(), "10.0.0.2", kept, password+"?", fresh); !errors.Is(err, session.ErrBadCredentials) {
		t.Errorf("changing it with a wrong current password: %v, want ErrBadCredentials", err)
	}
	if err := one.ChangePassword(t.Context(), "10.0.0.2", kept, password, fresh); err != nil {
		t.Fatal(err)
	}
	if _, err := two.Verify(t.Context(), kept); !errors.Is(err, session.ErrInvalid) {
		t.Errorf("a token of the old password on the other instance: %v, want ErrInvalid", err)
	}
	if _, err := two.SignIn(t.Context(), "10.0.0.2", name, password); !errors.Is(err, session.ErrBadCredentials) {
		t.Errorf("the old password: %v, want ErrBadCredentials", err)
	}
	signIn(fresh)
}

// TestThrottleSlowsGuessesNotTheOwner: failures from one address past the
// free ones make it wait, longer each time; the owner, from another
// address, signs in meanwhile; a name without an account is throttled
// alike.
func TestThrottleSlowsGuessesNotTheOwner(t *testing.T) {
	rdb, db, mr := backendsClock(t)
	d := session.NewDesk(session.DeskOptions{Keys: keys(t, secret, nil), Accounts: session.NewAccounts(db), Redis: rdb,
		Throttle: session.ThrottleOptions{Free: 2, Loose: 5, Base: 100 * time.Millisecond, Cap: time.Hour}})
	name := unique("gina")
	if _, err := d.Create(t.Context(), name, password); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{name, unique("ghost")} {
		var waits []time.Duration
		for range 5 {
			// Each guess once the pair's wait is over: retried while it
			// is refused unjudged.
			var err error
			for deadline := time.Now().Add(10 * time.Second); ; {
				_, err = d.SignIn(t.Context(), "192.0.2.1", target, "not the password at all")
				if errors.Is(err, session.ErrBadCredentials) || !errors.Is(err, session.ErrThrottled) || time.Now().After(deadline) {
					break
				}
				if mr != nil {
					mr.FastForward(50 * time.Millisecond)
				}
			}
			if !errors.Is(err, session.ErrBadCredentials) {
				t.Fatalf("%s: a guess: %v, want ErrBadCredentials", target, err)
			}
			var th *session.ThrottledError
			if errors.As(err, &th) {
				waits = append(waits, th.RetryAfter)
			} else {
				waits = append(waits, 0)
			}
		}
		if want := []time.Duration{0, 0, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}; !slices.Equal(waits, want) {
			t.Errorf("%s: waits after each guess %v, want %v", target, waits, want)
		}
		_, err := d.SignIn(t.Context(), "192.0.2.1", target, password)
		if !errors.Is(err, session.ErrThrottled) || errors.Is(err, session.ErrBadCredentials) {
			t.Errorf("%s: a try while waiting, even with the password: %v, want it refused unjudged", target, err)
		}
	}
	// The name took its 5 failures (Loose): another guessing address now
	// waits from its first failure; the owner's address is not one of them.
	if _, err := d.SignIn(t.Context(), "198.51.100.7", name, "another wrong guess"); !errors.Is(err, session.ErrThrottled) {
		t.Errorf("a second guessing address past the name's loose count: %v, want a wait from its first failure", err)
	}
	if _, err := d.SignIn(t.Context(), "203.0.113.9", name, password); err != nil {
		t.Errorf("the owner from an address with no failures: %v, want signed in", err)
	}
}

// TestForgedTokensAreRefused (finding 10): signed with the right key, a
// token good for a century, or naming no session, is refused.
func TestForgedTokensAreRefused(t *testing.T) {
	rdb, db := backends(t)
	d := desk(t, rdb, db, true)
	tok, err := d.SignIn(t.Context(), "127.0.0.1", unique("hank"), "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claims := func(sub int64, exp time.Time, sid string) string {
		return signHS256(t, secret, map[string]any{"sub": strconv.FormatInt(sub, 10), "iss": "seckill", "iat": now.Unix(), "exp": exp.Unix(), "sid": sid})
	}
	for what, token := range map[string]string{
		"exp a century away": claims(tok.Buyer, now.AddDate(100, 0, 0), "s1"),
		"no session id":      claims(tok.Buyer, now.Add(time.Minute), ""),
	} {
		if b, err := d.Verify(t.Context(), token); !errors.Is(err, session.ErrInvalid) {
			t.Errorf("%s: %+v %v, want ErrInvalid", what, b, err)
		}
	}
	if _, err := d.Verify(t.Context(), claims(tok.Buyer, now.Add(time.Minute), "s1")); err != nil {
		t.Errorf("the same claims within the lifetime: %v, want the token taken", err)
	}
}

// TestTokensOfNoAccountAreRefused (issue 36, finding 10): signed with the
// right key, a token whose buyer has no account (an id no one was given,
// a lab product's user id) is refused with ErrNoAccount; a numbered buyer
// given an account (Accounts.Numbered) and a signed-in one are taken. The
// numbered ids are drawn, so that accounts other tests marked in a shared
// Redis are not these.
func TestTokensOfNoAccountAreRefused(t *testing.T) {
	rdb, db := backends(t)
	d := desk(t, rdb, db, true)
	tok, err := d.SignIn(t.Context(), "127.0.0.1", unique("ivy"), "")
	if err != nil {
		t.Fatal(err)
	}
	minted := mint(t)
	lab, with, also := numbered(), numbered(), numbered()
	nobody := tok.Buyer ^ 1 // a named buyer's id beside ivy's: no account has it
	for what, sub := range map[string]int64{
		"a named buyer's id no account has": nobody,
		"a lab product's user id":           lab,
		"the last id below the named ones":  api.FirstNamedBuyer - 1,
	} {
		if b, err := d.Verify(t.Context(), minted(sub)); !errors.Is(err, session.ErrNoAccount) {
			t.Errorf("%s (%d): %+v %v, want ErrNoAccount", what, sub, b, err)
		}
	}
	if _, err := d.Verify(t.Context(), minted(tok.Buyer)); err != nil {
		t.Errorf("ivy's id: %v, want the token taken", err)
	}
	if err := session.NewAccounts(db).Numbered(t.Context(), rdb, with, also, with); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []int64{with, also} {
		if b, err := d.Verify(t.Context(), minted(sub)); err != nil || b.ID != sub {
			t.Errorf("numbered buyer %d with an account: %+v %v, want taken", sub, b, err)
		}
	}
	if _, err := d.Verify(t.Context(), minted(lab)); !errors.Is(err, session.ErrNoAccount) {
		t.Errorf("numbered buyer %d, no account made: %v, want ErrNoAccount", lab, err)
	}
	if err := session.NewAccounts(db).Numbered(t.Context(), rdb, api.FirstNamedBuyer); err == nil {
		t.Error("a numbered account for a named buyer's id: made, want refused")
	}
}

// TestAccountMarkSparesSQL: a token's account is known from its mark in
// Redis, without SQL, so a database that does not answer holds no
// signed-in purchase back; an account whose mark is gone (a Redis
// restarted empty) is read from SQL within AccountReadTimeout (an error,
// not a hang, when the database does not answer) and marked again. The
// silent database is a TCP listener that never answers the handshake.
func TestAccountMarkSparesSQL(t *testing.T) {
	rdb, db := backends(t)
	d := desk(t, rdb, db, true)
	silent := session.NewDesk(session.DeskOptions{Keys: keys(t, secret, nil), Accounts: session.NewAccounts(silentDB(t)), Redis: rdb})
	tok, err := d.SignIn(t.Context(), "127.0.0.1", unique("june"), "")
	if err != nil {
		t.Fatal(err)
	}
	n := numbered()
	if err := session.NewAccounts(db).Numbered(t.Context(), rdb, n); err != nil {
		t.Fatal(err)
	}
	minted := mint(t)
	verify := func(d *session.Desk, token string) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*session.AccountReadTimeout)
		defer cancel()
		began := time.Now()
		_, err := d.Verify(ctx, token)
		return time.Since(began), err
	}
	for what, token := range map[string]string{"signed in": tok.Token, "numbered": minted(n)} {
		if _, err := verify(silent, token); err != nil {
			t.Errorf("%s, marked, the database silent: %v, want the token taken", what, err)
		}
	}
	for _, id := range []int64{tok.Buyer, n} { // Redis restarted empty
		if err := rdb.Del(t.Context(), session.MarkKey(id)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	took, err := verify(silent, tok.Token)
	if err == nil || errors.Is(err, session.ErrNoAccount) || took > 3*session.AccountReadTimeout {
		t.Errorf("unmarked, the database silent: %v after %v, want an error within about %v", err, took, session.AccountReadTimeout)
	}
	for what, token := range map[string]string{"signed in": tok.Token, "numbered": minted(n)} {
		if _, err := verify(d, token); err != nil {
			t.Errorf("%s, unmarked, the database up: %v, want the token taken", what, err)
		}
		if _, err := verify(silent, token); err != nil {
			t.Errorf("%s, marked again by that read, the database silent: %v, want the token taken", what, err)
		}
	}
}

// mint signs a token for buyer sub with the desks' key, as a leaked key
// would.
func mint(t *testing.T) func(sub int64) string {
	now := time.Now()
	return func(sub int64) string {
		return signHS256(t, secret, map[string]any{"sub": strconv.FormatInt(sub, 10), "iss": "seckill",
			"iat": now.Unix(), "exp": now.Add(time.Minute).Unix(), "sid": "s1"})
	}
}

// numbered draws a numbered buyer's id (below api.FirstNamedBuyer).
func numbered() int64 { return 1 + mrand.Int64N(api.FirstNamedBuyer-1) }

// silentDB is a database that accepts connections and never answers.
func silentDB(t *testing.T) *gorm.DB {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	db, err := gorm.Open(mysql.New(mysql.Config{DSN: "root@tcp(" + ln.Addr().String() + ")/silent", SkipInitializeWithVersion: true}),
		&gorm.Config{Logger: logger.Discard, DisableAutomaticPing: true})
	if err != nil {
		t.Fatal(err)
	}
	if sqlDB, err := db.DB(); err == nil {
		t.Cleanup(func() { sqlDB.Close() })
	}
	return db
}
