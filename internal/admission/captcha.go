package admission

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/dchest/captcha"
	"github.com/redis/go-redis/v9"
)

// Outcomes of a captcha.
var (
	// ErrCaptcha: the answer was wrong, or the captcha unknown, expired or
	// tried already (each captcha is tried once).
	ErrCaptcha = errors.New("admission: captcha not solved")
	// ErrNoCaptcha: no captcha has this id (never made, expired or tried).
	ErrNoCaptcha = errors.New("admission: no such captcha")
)

// Captcha sizes and lifetime.
const (
	CaptchaDigits     = 6
	CaptchaWidth      = 240
	CaptchaHeight     = 80
	DefaultCaptchaTTL = 2 * time.Minute
)

// Captchas makes image captchas with dchest/captcha and keeps their
// solutions in Redis, not in the library's per-process store, so that a
// captcha drawn by one instance behind the gate is checked by another.
type Captchas struct {
	rdb redis.Cmdable
	ttl time.Duration
}

// NewCaptchas keeps solutions in rdb for ttl (DefaultCaptchaTTL when ttl <= 0).
func NewCaptchas(rdb redis.Cmdable, ttl time.Duration) *Captchas {
	if ttl <= 0 {
		ttl = DefaultCaptchaTTL
	}
	return &Captchas{rdb: rdb, ttl: ttl}
}

func captchaKey(id string) string { return "seckill:captcha:" + id }

// New makes a captcha and returns its id.
func (c *Captchas) New(ctx context.Context) (string, error) {
	id := rand.Text()
	digits := captcha.RandomDigits(CaptchaDigits)
	text := make([]byte, len(digits))
	for i, d := range digits {
		text[i] = '0' + d
	}
	if err := c.rdb.Set(ctx, captchaKey(id), text, c.ttl).Err(); err != nil {
		return "", fmt.Errorf("keeping a captcha: %w", err)
	}
	return id, nil
}

// WriteImage writes captcha id as a PNG, or returns ErrNoCaptcha.
func (c *Captchas) WriteImage(ctx context.Context, w io.Writer, id string) error {
	text, err := c.rdb.Get(ctx, captchaKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return ErrNoCaptcha
	}
	if err != nil {
		return fmt.Errorf("reading a captcha: %w", err)
	}
	digits := make([]byte, len(text))
	for i, ch := range text {
		digits[i] = ch - '0'
	}
	_, err = captcha.NewImage(id, digits, CaptchaWidth, CaptchaHeight).WriteTo(w)
	return err
}

// Verify checks answer against captcha id, once: the captcha is gone
// afterwards, right or wrong, so that it cannot be guessed at.
func (c *Captchas) Verify(ctx context.Context, id, answer string) error {
	if id == "" || answer == "" {
		return fmt.Errorf("%w: send captcha_id and captcha (the digits in its image; POST /api/captcha for one)", ErrCaptcha)
	}
	want, err := c.rdb.GetDel(ctx, captchaKey(id)).Result()
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("%w: the captcha is unknown, expired or tried already; ask for another", ErrCaptcha)
	}
	if err != nil {
		return fmt.Errorf("checking a captcha: %w", err)
	}
	if answer != want {
		return fmt.Errorf("%w: wrong digits; ask for another captcha", ErrCaptcha)
	}
	return nil
}
