package admission

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Outcomes of redeeming a purchase path token.
var (
	// ErrPathRequired: the product asks for a purchase path and the
	// purchase carried no valid token (none, expired, replaced by a newer
	// one, or issued to another buyer or product).
	ErrPathRequired = errors.New("admission: a purchase path token is required")
	// ErrPathUsed: the token was redeemed by another purchase already.
	ErrPathUsed = errors.New("admission: the purchase path token was used")
)

// DefaultPathTTL is how long an issued path token stays valid.
const DefaultPathTTL = time.Minute

// maxTokenLen bounds a presented token: an issued one is 26 characters.
const maxTokenLen = 64

var (
	//go:embed redeem.lua
	redeemLua    string
	redeemScript = redis.NewScript(redeemLua)
	//go:embed close.lua
	closeLua    string
	closeScript = redis.NewScript(closeLua)
)

// Paths issues and redeems one-time purchase path tokens, miaosha's hidden
// purchase path: a product that asks for one sells only to a purchase that
// carries a token issued to its buyer for it, from the opening second, so
// a bot cannot fire purchases before it or without signing in (and, with a
// captcha, without a person). One live token per buyer and product: a new
// one replaces the last, so a buyer who asks again and again keeps one key
// in Redis.
type Paths struct {
	rdb redis.Cmdable
	ttl time.Duration
}

// NewPaths keeps tokens in rdb for ttl (DefaultPathTTL when ttl <= 0).
func NewPaths(rdb redis.Cmdable, ttl time.Duration) *Paths {
	if ttl <= 0 {
		ttl = DefaultPathTTL
	}
	return &Paths{rdb: rdb, ttl: ttl}
}

// PathToken is an issued token and when it stops being valid.
type PathToken struct {
	Token   string
	Expires time.Time
}

func pathKey(buyer, product int64) string {
	return "seckill:path:" + strconv.FormatInt(product, 10) + ":" + strconv.FormatInt(buyer, 10)
}

// Issue gives buyer a token for one purchase of product.
func (p *Paths) Issue(ctx context.Context, buyer, product int64) (PathToken, error) {
	t := PathToken{Token: rand.Text(), Expires: time.Now().Add(p.ttl)}
	if err := p.rdb.Set(ctx, pathKey(buyer, product), t.Token, p.ttl).Err(); err != nil {
		return PathToken{}, fmt.Errorf("issuing a purchase path to buyer %d for product %d: %w", buyer, product, err)
	}
	return t, nil
}

// Redeem spends buyer's token for a purchase of product: ErrPathRequired or
// ErrPathUsed when it cannot. key is the purchase's idempotency key: the
// same purchase retried with it redeems its token again, so a buyer whose
// answer was lost is not refused by their own first attempt.
func (p *Paths) Redeem(ctx context.Context, buyer, product int64, token, key string) error {
	if token == "" || len(token) > maxTokenLen {
		return fmt.Errorf("%w: ask POST /api/products/%d/path for one", ErrPathRequired, product)
	}
	n, err := redeemScript.Run(ctx, p.rdb, []string{pathKey(buyer, product)}, token, key).Int()
	if err != nil {
		return fmt.Errorf("redeeming the purchase path of buyer %d for product %d: %w", buyer, product, err)
	}
	switch n {
	case 1:
		return nil
	case 2:
		return fmt.Errorf("%w: each token buys once; ask POST /api/products/%d/path for another", ErrPathUsed, product)
	}
	return fmt.Errorf("%w: the token is unknown, expired, replaced or not yours; ask POST /api/products/%d/path for one", ErrPathRequired, product)
}

// CloseRetries ends the retries of buyer's purchase of product with key,
// whose order was cancelled: a retry redeems the token again so that a
// buyer whose answer was lost gets their order, but once that order is
// cancelled the same key would buy anew, on a token spent already. From
// here on the token answers ErrPathUsed to every purchase.
func (p *Paths) CloseRetries(ctx context.Context, buyer, product int64, key string) error {
	if err := closeScript.Run(ctx, p.rdb, []string{pathKey(buyer, product)}, key).Err(); err != nil {
		return fmt.Errorf("closing the purchase path of buyer %d for product %d: %w", buyer, product, err)
	}
	return nil
}
