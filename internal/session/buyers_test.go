package session_test

import (
	"errors"
	"os"
	"sync"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"seckill/internal/api"
	"seckill/internal/session"
	"seckill/internal/testkit/testenv"
)

// TestANameIsOneBuyer: the same name, in any case and however many sign in
// with it at once, is one buyer, with an id in the named buyers' range.
func TestANameIsOneBuyer(t *testing.T) {
	_, db, _ := testenv.Local(t)
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
	buyers := session.NewBuyers(db)
	ids := make([]int64, 8)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range ids {
		wg.Go(func() {
			<-gate
			name := "Alice"
			if i%2 == 1 {
				name = " alice "
			}
			b, err := buyers.SignIn(t.Context(), name)
			if err != nil {
				t.Error(err)
			}
			ids[i] = b.ID
		})
	}
	close(gate)
	wg.Wait()
	for i, id := range ids {
		if id != ids[0] || id < api.FirstNamedBuyer {
			t.Fatalf("sign-in %d: buyer %d, want %d for every one, at least %d", i, id, ids[0], api.FirstNamedBuyer)
		}
	}
	bob, err := buyers.SignIn(t.Context(), "bob")
	if err != nil || bob.ID == ids[0] || bob.Name != "bob" {
		t.Errorf("bob: %+v %v, want another buyer", bob, err)
	}
	if _, err := buyers.SignIn(t.Context(), "\x00"); !errors.Is(err, session.ErrBadName) {
		t.Errorf("a NUL name: %v, want ErrBadName", err)
	}
	if err := session.Migrate(t.Context(), db); err != nil {
		t.Errorf("migrating again: %v", err)
	}
}
