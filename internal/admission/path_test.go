package admission_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"seckill/internal/admission"
	"seckill/internal/testkit"
)

// A token buys once, for its buyer and product; the same purchase retried
// with its idempotency key redeems it again; a newer token replaces it.
func TestPathTokenBuysOnce(t *testing.T) {
	rdb := testkit.NewRedis(t).Client
	paths := admission.NewPaths(rdb, 0)
	ctx := t.Context()
	buyer, product := time.Now().UnixNano(), int64(91_001) // the shared Redis keeps other runs' keys
	tok, err := paths.Issue(ctx, buyer, product)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(tok.Expires); left <= 0 || left > admission.DefaultPathTTL {
		t.Fatalf("expires in %s, want within the default TTL %s", left, admission.DefaultPathTTL)
	}
	for _, c := range []struct {
		name           string
		buyer, product int64
		token          string
	}{
		{"no token", buyer, product, ""},
		{"another buyer's", buyer + 1, product, tok.Token},
		{"another product's", buyer, product + 1, tok.Token},
		{"a made-up one", buyer, product, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"},
		{"too long", buyer, product, string(bytes.Repeat([]byte("A"), 65))},
	} {
		if err := paths.Redeem(ctx, c.buyer, c.product, c.token, ""); !errors.Is(err, admission.ErrPathRequired) {
			t.Errorf("%s: %v, want ErrPathRequired", c.name, err)
		}
	}
	if err := paths.Redeem(ctx, buyer, product, tok.Token, "k1"); err != nil {
		t.Fatalf("first use: %v", err)
	}
	if err := paths.Redeem(ctx, buyer, product, tok.Token, "k1"); err != nil {
		t.Fatalf("the same purchase retried with its key: %v", err)
	}
	for _, key := range []string{"", "k2"} {
		if err := paths.Redeem(ctx, buyer, product, tok.Token, key); !errors.Is(err, admission.ErrPathUsed) {
			t.Fatalf("reused by a purchase with key %q: %v, want ErrPathUsed", key, err)
		}
	}
	first, err := paths.Issue(ctx, buyer, product)
	if err != nil {
		t.Fatal(err)
	}
	second, err := paths.Issue(ctx, buyer, product)
	if err != nil {
		t.Fatal(err)
	}
	if err := paths.Redeem(ctx, buyer, product, first.Token, ""); !errors.Is(err, admission.ErrPathRequired) {
		t.Fatalf("a token replaced by a newer one: %v, want ErrPathRequired", err)
	}
	if err := paths.Redeem(ctx, buyer, product, second.Token, ""); err != nil {
		t.Fatalf("the newer token: %v", err)
	}
}

// A token is valid for its TTL only (on the embedded server, whose clock
// the test moves).
func TestPathTokenExpires(t *testing.T) {
	srv := testkit.NewEmbeddedRedis(t)
	rdb := srv.Client
	const ttl = 200 * time.Millisecond
	paths := admission.NewPaths(rdb, ttl)
	buyer := time.Now().UnixNano()
	tok, err := paths.Issue(t.Context(), buyer, 7)
	if err != nil {
		t.Fatal(err)
	}
	srv.JumpClock(t, ttl+time.Millisecond)
	if err := paths.Redeem(t.Context(), buyer, 7, tok.Token, ""); !errors.Is(err, admission.ErrPathRequired) {
		t.Fatalf("after the TTL: %v, want ErrPathRequired", err)
	}
}

// Limit requests per address per period, shared by every limiter on the
// Redis; other addresses are counted apart; 0 is no limit.
func TestPerAddressLimit(t *testing.T) {
	rdb := testkit.NewRedis(t).Client
	const limit = 3
	a, b := admission.NewPerAddress(rdb, limit, time.Hour), admission.NewPerAddress(rdb, limit, time.Hour)
	addr := "192.0.2." + time.Now().Format("150405.000000000")
	for i := range limit {
		l := a
		if i%2 == 1 {
			l = b
		}
		if err := l.Allow(t.Context(), addr); err != nil {
			t.Fatalf("request %d of %d: %v", i+1, limit, err)
		}
	}
	if err := b.Allow(t.Context(), addr); !errors.Is(err, admission.ErrRateLimited) {
		t.Fatalf("request %d: %v, want ErrRateLimited", limit+1, err)
	}
	if err := a.Allow(t.Context(), addr+"1"); err != nil {
		t.Fatalf("another address: %v", err)
	}
	off := admission.NewPerAddress(rdb, 0, time.Hour)
	for range limit + 1 {
		if err := off.Allow(t.Context(), addr); err != nil {
			t.Fatalf("no limit: %v", err)
		}
	}
}
