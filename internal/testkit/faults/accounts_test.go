package faults_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"seckill/internal/app"
	"seckill/internal/session"
	"seckill/internal/testkit/testenv"
)

// A service takes a buyer's token only if the buyer has an account (401
// no_account otherwise), and these tests keep numbered buyers whose
// tokens they mint (testenv.Token). token gives a numbered buyer an
// account in the database of the service it is for, once, before minting:
// every service a test starts says where it keeps its accounts (start,
// newSale).
var accounts = struct {
	sync.Mutex
	of   map[string]keeper           // a service's URL: where it keeps its accounts
	made map[*gorm.DB]map[int64]bool // the numbered buyers given an account there
}{of: map[string]keeper{}, made: map[*gorm.DB]map[int64]bool{}}

// keeper is where a service keeps its accounts: the rows in db, their
// marks in rdb.
type keeper struct {
	db  *gorm.DB
	rdb redis.Cmdable
}

// start is testenv.Start, the service's accounts kept where token finds
// them.
func start(tb testing.TB, cfg app.Config, extras app.Extras) *app.Server {
	tb.Helper()
	srv := testenv.Start(tb, cfg, extras)
	keepsAccounts(tb, srv.DB(), srv.Redis(), srv.URL)
	return srv
}

// keepsAccounts says that the services at urls keep their accounts in db
// and mark them in rdb.
func keepsAccounts(tb testing.TB, db *gorm.DB, rdb redis.Cmdable, urls ...string) {
	accounts.Lock()
	defer accounts.Unlock()
	for _, u := range urls {
		accounts.of[u] = keeper{db, rdb}
	}
	tb.Cleanup(func() {
		accounts.Lock()
		defer accounts.Unlock()
		for _, u := range urls {
			delete(accounts.of, u)
		}
		delete(accounts.made, db)
	})
}

// haveAccounts gives the numbered buyers users an account at the service
// at url, those that have none from here yet, in one statement.
func haveAccounts(url string, users ...int64) error {
	accounts.Lock()
	k, ok := accounts.of[url]
	db := k.db
	var missing []int64
	for _, u := range users {
		if !accounts.made[db][u] {
			missing = append(missing, u)
		}
	}
	accounts.Unlock()
	if !ok {
		return fmt.Errorf("no database is known for the service at %s: start it with start, or name it to newSale", url)
	}
	if len(missing) == 0 {
		return nil
	}
	// Bounded, so that a fault holding the database back fails the test
	// that forgot to make its buyers' accounts first, not hangs it.
	ctx, cancel := context.WithTimeout(context.Background(), accountsPatience)
	defer cancel()
	if err := session.NewAccounts(db).Numbered(ctx, k.rdb, missing...); err != nil {
		return err
	}
	accounts.Lock()
	defer accounts.Unlock()
	if accounts.made[db] == nil {
		accounts.made[db] = map[int64]bool{}
	}
	for _, u := range missing {
		accounts.made[db][u] = true
	}
	return nil
}

// accountsPatience bounds the making of accounts.
const accountsPatience = 30 * time.Second

// token is numbered buyer user's token for the service at url, the buyer
// given an account there first.
func token(url string, user int64) (string, error) {
	if err := haveAccounts(url, user); err != nil {
		return "", fmt.Errorf("an account for buyer %d: %w", user, err)
	}
	return testenv.Token(user), nil
}

// mustToken is token for a test's own goroutine.
func mustToken(t *testing.T, url string, user int64) string {
	t.Helper()
	tok, err := token(url, user)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// accounts gives the numbered buyers users an account on every instance
// of the sale: before a fault that would hold token's SQL back.
func (s *sale) accounts(users ...int64) {
	s.t.Helper()
	for _, url := range s.urls {
		if err := haveAccounts(url, users...); err != nil {
			s.t.Fatal(err)
		}
	}
}
