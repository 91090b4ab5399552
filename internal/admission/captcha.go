package admission

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	_ "embed"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/dchest/captcha"
	"github.com/redis/go-redis/v9"
)

// Outcomes of a captcha.
var (
	// ErrCaptcha: the answer was wrong, or the captcha unknown, expired,
	// tried already (each captcha is tried once) or made for something else
	// (another buyer, product, opening or network).
	ErrCaptcha = errors.New("admission: captcha not solved")
	// ErrNoCaptcha: no captcha has this id (never made, expired or tried).
	ErrNoCaptcha = errors.New("admission: no such captcha")
)

// Captcha sizes, lifetime and how many one client may hold.
const (
	CaptchaDigits     = 6
	CaptchaWidth      = 240
	CaptchaHeight     = 80
	DefaultCaptchaTTL = 2 * time.Minute
	// DefaultCaptchasPerAddress and DefaultCaptchasPerNetwork bound the
	// captchas one address and one network (Network) make per TTL: a person
	// needs one per product or account and a few more for the digits they
	// misread; an office or a carrier's NAT shares a network.
	DefaultCaptchasPerAddress = 10
	DefaultCaptchasPerNetwork = 100
)

var (
	//go:embed solve.lua
	solveLua    string
	solveScript = redis.NewScript(solveLua)
)

// CaptchaOptions configure Captchas; a zero field takes its default.
type CaptchaOptions struct {
	// TTL is how long a captcha lives, and the window its quotas count in.
	// Default: DefaultCaptchaTTL.
	TTL time.Duration
	// PerAddress and PerNetwork bound the captchas made per TTL by one
	// client address and by its network; negative lifts the bound.
	// Default: DefaultCaptchasPerAddress, DefaultCaptchasPerNetwork.
	PerAddress, PerNetwork int
}

// Captchas makes image captchas with dchest/captcha and keeps them in
// Redis, not in the library's per-process store, so that a captcha drawn by
// one instance behind the gate is shown and checked by another. Each is
// drawn once, when it is made, and its PNG kept beside its solution: showing
// it costs a read, so asking for the image again and again costs no CPU.
//
// A captcha is bound to what it was made for, an opaque string the caller
// builds (PathBinding, AccountBinding): it is solved only for the same
// binding, so that one made for a product cannot buy another, or another
// buyer, or the same product after an operator moved its opening.
type Captchas struct {
	rdb redis.Cmdable
	opt CaptchaOptions
}

// NewCaptchas keeps captchas in rdb.
func NewCaptchas(rdb redis.Cmdable, opt CaptchaOptions) *Captchas {
	if opt.TTL <= 0 {
		opt.TTL = DefaultCaptchaTTL
	}
	if opt.PerAddress == 0 {
		opt.PerAddress = DefaultCaptchasPerAddress
	}
	if opt.PerNetwork == 0 {
		opt.PerNetwork = DefaultCaptchasPerNetwork
	}
	return &Captchas{rdb: rdb, opt: opt}
}

func captchaKey(id string) string { return "seckill:captcha:" + id }

// PathBinding binds a captcha to a buyer's purchase path for a product's
// opening (its starts_at, zero for a product without one).
func PathBinding(product, buyer int64, opensAt time.Time) string {
	opens := int64(0)
	if !opensAt.IsZero() {
		opens = opensAt.UnixNano()
	}
	return "path:" + strconv.FormatInt(product, 10) + ":" + strconv.FormatInt(buyer, 10) + ":" + strconv.FormatInt(opens, 10)
}

// AccountBinding binds a captcha to the creation of an account from a
// network (Network).
func AccountBinding(network string) string { return "account:" + network }

// Network is addr's network, the unit a client controls many addresses of:
// its IPv4 /24 or its IPv6 /64. An IPv4-mapped IPv6 address is its IPv4.
func Network(addr netip.Addr) string {
	addr = addr.Unmap()
	bits := 64
	if addr.Is4() {
		bits = 24
	}
	p, err := addr.Prefix(bits)
	if err != nil { // the zero Addr
		return "invalid"
	}
	return p.String()
}

// Allow counts a captcha made for client against its address's and its
// network's quotas, or refuses it with ErrRateLimited: one round trip, the
// two counters in one slot. The counts are fixed windows of a TTL, so an
// address holds at most twice its quota of live captchas at a window's
// edge.
func (c *Captchas) Allow(ctx context.Context, client netip.Addr) error {
	client = client.Unmap()
	network := Network(client)
	window := strconv.FormatInt(time.Now().UnixMilli()/c.opt.TTL.Milliseconds(), 10)
	prefix := "seckill:captchas:{" + network + "}:" + window
	counts, err := windowsScript.Run(ctx, c.rdb, []string{prefix, prefix + ":" + client.String()}, c.opt.TTL.Milliseconds()).Int64Slice()
	if err != nil {
		return fmt.Errorf("counting the captchas of %s: %w", client, err)
	}
	if c.opt.PerNetwork > 0 && counts[0] > int64(c.opt.PerNetwork) {
		return fmt.Errorf("%w: at most %d captchas per %s from one network (%s); solve one you have", ErrRateLimited, c.opt.PerNetwork, c.opt.TTL, network)
	}
	if c.opt.PerAddress > 0 && counts[1] > int64(c.opt.PerAddress) {
		return fmt.Errorf("%w: at most %d captchas per %s from one address; solve one you have", ErrRateLimited, c.opt.PerAddress, c.opt.TTL)
	}
	return nil
}

// New makes a captcha for bind and returns its id. The image is drawn here,
// once.
func (c *Captchas) New(ctx context.Context, bind string) (string, error) {
	id := rand.Text()
	digits := captcha.RandomDigits(CaptchaDigits)
	text := make([]byte, len(digits))
	for i, d := range digits {
		text[i] = '0' + d
	}
	var png bytes.Buffer
	if _, err := captcha.NewImage(id, digits, CaptchaWidth, CaptchaHeight).WriteTo(&png); err != nil {
		return "", fmt.Errorf("drawing a captcha: %w", err)
	}
	key := captchaKey(id)
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, "answer", text, "bind", bind, "png", png.Bytes())
		p.PExpire(ctx, key, c.opt.TTL)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("keeping a captcha: %w", err)
	}
	return id, nil
}

// Image returns captcha id's PNG, or ErrNoCaptcha.
func (c *Captchas) Image(ctx context.Context, id string) ([]byte, error) {
	png, err := c.rdb.HGet(ctx, captchaKey(id), "png").Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNoCaptcha
	}
	if err != nil {
		return nil, fmt.Errorf("reading a captcha: %w", err)
	}
	return png, nil
}

// Solve checks answer against captcha id made for bind, once: the captcha
// is gone afterwards, right or wrong, so that it cannot be guessed at. A
// captcha made for another binding fails as a wrong answer does.
func (c *Captchas) Solve(ctx context.Context, id, answer, bind string) error {
	if id == "" || answer == "" {
		return fmt.Errorf("%w: send captcha_id and captcha (the digits in its image; POST /api/captcha for one)", ErrCaptcha)
	}
	got, err := solveScript.Run(ctx, c.rdb, []string{captchaKey(id)}).StringSlice()
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("%w: the captcha is unknown, expired or tried already; ask for another", ErrCaptcha)
	}
	if err != nil {
		return fmt.Errorf("checking a captcha: %w", err)
	}
	want, made := got[0], got[1]
	if subtle.ConstantTimeCompare([]byte(answer), []byte(want)) != 1 {
		return fmt.Errorf("%w: wrong digits; ask for another captcha", ErrCaptcha)
	}
	if made != bind {
		return fmt.Errorf("%w: the captcha was made for another buyer, product, opening or network; ask for another", ErrCaptcha)
	}
	return nil
}
