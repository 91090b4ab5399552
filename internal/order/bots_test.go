package order_test

import (
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
	lp, ll := &latePaths{}, &lateLimit{}
	f := newFixture(t, order.Options{Paths: lp, Admit: ll})
	lp.Paths, ll.PerBuyer = admission.NewPaths(f.rdb, 0), admission.NewPerBuyer(f.rdb, time.Hour)
	paths := lp.Paths
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
	if n := f.rdb.Exists(t.Context(), admission.PerBuyerKey(1, 1)).Val(); n != 0 {
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

// A path token spent by a purchase stays spent once that purchase's order
// is cancelled: its retry with the same key is refused, not a new order
// (issue 36, finding 6: the retry redeemed the token again and bought).
func TestCancelledPathPurchaseStaysSpent(t *testing.T) {
	lp := &latePaths{}
	f := newFixture(t, order.Options{Paths: lp})
	lp.Paths = admission.NewPaths(f.rdb, 0)
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 10, Path: true})
	tok, err := lp.Issue(t.Context(), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	buy := func() (order.Order, error) {
		o, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: 1, Path: tok.Token, Key: "k1"})
		return o, err
	}
	o, err := buy()
	if err != nil {
		t.Fatalf("with the token: %v", err)
	}
	if again, err := buy(); err != nil || again.ID != o.ID {
		t.Fatalf("the purchase retried before the cancel: order %v, %v; want order %v", again.ID, err, o.ID)
	}
	if _, err := f.svc.Lifecycle().Cancel(t.Context(), o.ID, order.Buyer{ID: 1, Signed: true}); err != nil {
		t.Fatalf("cancelling: %v", err)
	}
	if again, err := buy(); !errors.Is(err, admission.ErrPathUsed) {
		t.Fatalf("the purchase retried after the cancel: order %v, %v; want ErrPathUsed", again.ID, err)
	}
	if a := f.Audit(1); a.Remaining != 10 || a.Orders != 0 {
		t.Errorf("audit: %+v, want nothing sold", a)
	}
}

// The rate limit is a buyer's per product: a buyer who hammers a sold-out
// product still buys another at once (issue 36, finding 3: one key per
// buyer kept every product refused while the buyer hammered one).
func TestRateLimitIsPerProduct(t *testing.T) {
	ll := &lateLimit{}
	f := newFixture(t, order.Options{Admit: ll})
	ll.PerBuyer = admission.NewPerBuyer(f.rdb, time.Hour)
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 1})
	f.Reset(catalogue.ProductSpec{ID: 2, Stock: 1})
	buy := func(buyer, product int64) error {
		_, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: buyer, ProductID: product})
		return err
	}
	if err := buy(1, 1); err != nil {
		t.Fatalf("the last unit of product 1: %v", err)
	}
	if err := buy(7, 1); err == nil {
		t.Fatal("buyer 7 bought product 1, which was sold out")
	}
	if err := buy(7, 1); !errors.Is(err, admission.ErrRateLimited) {
		t.Fatalf("buyer 7 again on product 1: %v, want ErrRateLimited", err)
	}
	if err := buy(7, 2); err != nil {
		t.Fatalf("buyer 7 on product 2, while product 1's key is busy: %v, want it sold", err)
	}
}

// The per-address limit counts the purchases of products that are not lab
// products; a lab product's buyers, one harness at one address, pass.
func TestPerAddressLimitSparesLabProducts(t *testing.T) {
	la := &lateAddress{}
	f := newFixture(t, order.Options{PerAddress: la})
	la.PerAddress = admission.NewPerAddress(f.rdb, 2, time.Hour)
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
// lateLimit is window_test.go's.
type (
	latePaths    struct{ *admission.Paths }
	lateAddress  struct{ *admission.PerAddress }
	lateCaptchas struct{ *admission.Captchas }
)

// A path token is issued from the opening only, for a product that asks for
// one, and for a solved captcha when the product asks for that too; it
// then buys.
func TestIssuePath(t *testing.T) {
	opens := time.Date(2030, 5, 1, 10, 0, 0, 0, time.UTC)
	clk := newClock(opens.Add(-time.Second))
	lp, lc := &latePaths{}, &lateCaptchas{}
	f := newFixture(t, order.Options{Paths: lp, Captchas: lc, Now: clk.now})
	lp.Paths, lc.Captchas = admission.NewPaths(f.rdb, 0), admission.NewCaptchas(f.rdb, admission.CaptchaOptions{})
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 5, StartsAt: &opens, Path: true})
	f.Reset(catalogue.ProductSpec{ID: 2, Stock: 5, StartsAt: &opens, Path: true, Captcha: true})
	f.Reset(catalogue.ProductSpec{ID: 3, Stock: 5})
	ask := func(product int64, captchaID, captcha string) (admission.PathToken, error) {
		return f.svc.Door().IssuePath(t.Context(), order.PathRequest{Buyer: 7, Product: product, CaptchaID: captchaID, Captcha: captcha})
	}
	door := f.svc.Door()
	if _, err := ask(1, "", ""); !errors.Is(err, order.ErrNotStarted) {
		t.Fatalf("before the opening: %v, want ErrNotStarted", err)
	}
	if _, err := door.CaptchaBinding(t.Context(), 7, 2); !errors.Is(err, order.ErrNotStarted) {
		t.Fatalf("a captcha before the opening: %v, want ErrNotStarted", err)
	}
	clk.set(opens)
	if _, err := door.CaptchaBinding(t.Context(), 7, 1); !errors.Is(err, order.ErrInvalid) {
		t.Errorf("a captcha for a product that asks for none: %v, want ErrInvalid", err)
	}
	if _, err := ask(3, "", ""); !errors.Is(err, order.ErrInvalid) {
		t.Errorf("a product without a path: %v, want ErrInvalid", err)
	}
	if _, err := ask(2, "", ""); !errors.Is(err, admission.ErrCaptcha) {
		t.Errorf("a captcha product, no captcha: %v, want ErrCaptcha", err)
	}
	// what a person reads off the image
	read := func(id string) string { return f.rdb.HGet(t.Context(), "seckill:captcha:"+id, "answer").Val() }
	newCaptcha := func(buyer, product int64) (string, error) {
		bind, err := door.CaptchaBinding(t.Context(), buyer, product)
		if err != nil {
			return "", err
		}
		return lc.New(t.Context(), bind)
	}
	other, err := newCaptcha(8, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ask(2, other, read(other)); !errors.Is(err, admission.ErrCaptcha) {
		t.Errorf("another buyer's solved captcha: %v, want ErrCaptcha", err)
	}
	id, err := newCaptcha(7, 2)
	if err != nil {
		t.Fatal(err)
	}
	answer := read(id)
	if _, err := ask(2, id, answer+"0"); !errors.Is(err, admission.ErrCaptcha) {
		t.Errorf("wrong digits: %v, want ErrCaptcha", err)
	}
	if _, err := ask(2, id, answer); !errors.Is(err, admission.ErrCaptcha) {
		t.Errorf("the right digits after a wrong try: %v, want ErrCaptcha (a captcha is tried once)", err)
	}
	for _, product := range []int64{1, 2} {
		var captchaID, captcha string
		if product == 2 {
			if captchaID, err = newCaptcha(7, product); err != nil {
				t.Fatal(err)
			}
			captcha = read(captchaID)
		}
		tok, err := ask(product, captchaID, captcha)
		if err != nil {
			t.Fatalf("product %d at the opening: %v", product, err)
		}
		if _, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 7, ProductID: product, Path: tok.Token}); err != nil {
			t.Errorf("buying product %d with the token: %v", product, err)
		}
	}
}
