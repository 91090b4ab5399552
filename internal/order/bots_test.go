package order_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"seckill/internal/admission"
	"seckill/internal/catalogue"
	"seckill/internal/order"
)

// A product with a path sells only to a purchase carrying its buyer's
// token, once; a retry of that purchase with its key gets its order; a
// refused purchase takes nothing and sets no rate-limit key.
func TestPathProductSellsOnlyWithAToken(t *testing.T) {
	var paths *admission.Paths
	var limit *admission.PerBuyer
	f := newFixture(t, order.Options{
		Paths: redeemFunc(func(ctx context.Context, buyer, product int64, token, key string) error {
			return paths.Redeem(ctx, buyer, product, token, key)
		}),
		Admit: admitFunc(func(ctx context.Context, buyer int64) error { return limit.Allow(ctx, buyer) }),
	})
	paths, limit = admission.NewPaths(f.rdb, 0), admission.NewPerBuyer(f.rdb, time.Hour)
	p := f.Reset(catalogue.ProductSpec{ID: 1, Stock: 10, Path: true})
	if p.Captcha || !p.Path {
		t.Fatalf("product %+v", p)
	}
	if _, err := f.svc.Catalogue().Reset(t.Context(), catalogue.ProductSpec{ID: 2, Stock: 1, Captcha: true}); !errors.Is(err, order.ErrInvalid) {
		t.Errorf("a captcha without a path: %v, want ErrInvalid", err)
	}
	buy := func(user int64, token, key string) error {
		_, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: user, ProductID: 1, Path: token, Key: key})
		return err
	}
	if err := buy(1, "", ""); !errors.Is(err, admission.ErrPathRequired) {
		t.Fatalf("no token: %v, want ErrPathRequired", err)
	}
	other, err := paths.Issue(t.Context(), 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := buy(1, other.Token, ""); !errors.Is(err, admission.ErrPathRequired) {
		t.Fatalf("another buyer's token: %v, want ErrPathRequired", err)
	}
	if n := f.rdb.Exists(t.Context(), "seckill:rate:1").Val(); n != 0 {
		t.Errorf("the refused buyer left a rate-limit key: the path is checked after the limit")
	}
	mine, err := paths.Issue(t.Context(), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := buy(1, mine.Token, "k1"); err != nil {
		t.Fatalf("with the buyer's token: %v", err)
	}
	if err := buy(1, mine.Token, "k1"); err != nil && !errors.Is(err, admission.ErrRateLimited) {
		t.Fatalf("the same purchase retried: %v, want its order or the rate limit", err)
	}
	if err := buy(1, mine.Token, "k2"); !errors.Is(err, admission.ErrPathUsed) {
		t.Fatalf("the token again, another purchase: %v, want ErrPathUsed", err)
	}
	if a := f.Audit(1); a.Remaining != 9 || a.Orders != 1 {
		t.Errorf("audit: %+v, want one sold", a)
	}
	bare := newFixture(t, order.Options{})
	bare.Reset(catalogue.ProductSpec{ID: 1, Stock: 1, Path: true})
	if _, _, err := bare.svc.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 1, Path: mine.Token}); !errors.Is(err, order.ErrNoPaths) {
		t.Errorf("a path product on a service without paths: %v, want ErrNoPaths", err)
	}
}

// The per-address limit counts the purchases of products that are not lab
// products; a lab product's buyers, one harness at one address, pass.
func TestPerAddressLimitSparesLabProducts(t *testing.T) {
	var perAddress *admission.PerAddress
	f := newFixture(t, order.Options{PerAddress: addressFunc(func(ctx context.Context, addr string) error {
		return perAddress.Allow(ctx, addr)
	})})
	perAddress = admission.NewPerAddress(f.rdb, 2, time.Hour)
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 10})
	f.Reset(catalogue.ProductSpec{ID: 2, Stock: 10, Lab: true})
	const addr = "198.51.100.7"
	var refused int
	for user := range int64(4) {
		_, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: user + 1, ProductID: 1, Client: addr})
		switch {
		case errors.Is(err, admission.ErrRateLimited):
			refused++
		case err != nil:
			t.Fatalf("buyer %d: %v", user+1, err)
		}
	}
	if refused != 2 {
		t.Errorf("%d of 4 purchases from one address refused, want 2 (the limit is 2)", refused)
	}
	for user := range int64(4) {
		if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: user + 1, ProductID: 2, Client: addr}); err != nil {
			t.Errorf("lab product, buyer %d: %v", user+1, err)
		}
	}
}

// The limits live in the fixture's Redis, which exists once the fixture
// does: these bind them late.
type (
	redeemFunc  func(ctx context.Context, buyer, product int64, token, key string) error
	admitFunc   func(ctx context.Context, buyer int64) error
	addressFunc func(ctx context.Context, addr string) error
)

func (f redeemFunc) Redeem(ctx context.Context, buyer, product int64, token, key string) error {
	return f(ctx, buyer, product, token, key)
}
func (f admitFunc) Allow(ctx context.Context, buyer int64) error   { return f(ctx, buyer) }
func (f addressFunc) Allow(ctx context.Context, addr string) error { return f(ctx, addr) }
