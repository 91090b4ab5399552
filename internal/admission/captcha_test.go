package admission_test

import (
	"bytes"
	"errors"
	"fmt"
	"image/png"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/admission"
	"seckill/internal/testkit"
)

// answer is what a person reads off captcha id's image.
func answer(t *testing.T, rdb redis.Cmdable, id string) string {
	t.Helper()
	a := rdb.HGet(t.Context(), "seckill:captcha:"+id, "answer").Val()
	if len(a) != admission.CaptchaDigits {
		t.Fatalf("solution %q, want %d digits", a, admission.CaptchaDigits)
	}
	return a
}

// A captcha draws as a PNG, is solved by its digits, and is tried once.
func TestCaptchaIsTriedOnce(t *testing.T) {
	rdb := testkit.NewRedis(t).Client
	caps := admission.NewCaptchas(rdb, admission.CaptchaOptions{})
	ctx, bind := t.Context(), admission.AccountBinding("192.0.2.0/24")
	id, err := caps.New(ctx, bind)
	if err != nil {
		t.Fatal(err)
	}
	img, err := caps.Image(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := png.DecodeConfig(bytes.NewReader(img)); err != nil || cfg.Width != admission.CaptchaWidth {
		t.Fatalf("image: %+v, %v", cfg, err)
	}
	right := answer(t, rdb, id)
	if err := caps.Solve(ctx, id, right, bind); err != nil {
		t.Fatalf("the right digits: %v", err)
	}
	if err := caps.Solve(ctx, id, right, bind); !errors.Is(err, admission.ErrCaptcha) {
		t.Fatalf("the right digits again: %v, want ErrCaptcha", err)
	}
	if _, err := caps.Image(ctx, id); !errors.Is(err, admission.ErrNoCaptcha) {
		t.Fatalf("the image of a tried captcha: %v, want ErrNoCaptcha", err)
	}
	other, err := caps.New(ctx, bind)
	if err != nil {
		t.Fatal(err)
	}
	wrong := "x" + answer(t, rdb, other)[1:]
	if err := caps.Solve(ctx, other, wrong, bind); !errors.Is(err, admission.ErrCaptcha) {
		t.Fatalf("wrong digits: %v, want ErrCaptcha", err)
	}
	if err := caps.Solve(ctx, other, wrong[1:], bind); !errors.Is(err, admission.ErrCaptcha) {
		t.Fatalf("a second try after a wrong one: %v, want ErrCaptcha", err)
	}
}

// A captcha solves only what it was made for: the right digits for another
// buyer, product, opening or network fail, as wrong digits do, and spend it.
func TestCaptchaSolvesOnlyItsBinding(t *testing.T) {
	rdb := testkit.NewRedis(t).Client
	caps := admission.NewCaptchas(rdb, admission.CaptchaOptions{})
	opens := time.Date(2030, 5, 1, 10, 0, 0, 0, time.UTC)
	made := admission.PathBinding(1, 7, opens)
	for name, bind := range map[string]string{
		"another product":   admission.PathBinding(2, 7, opens),
		"another buyer":     admission.PathBinding(1, 8, opens),
		"a moved opening":   admission.PathBinding(1, 7, opens.Add(time.Minute)),
		"no opening":        admission.PathBinding(1, 7, time.Time{}),
		"an account":        admission.AccountBinding("192.0.2.0/24"),
		"no binding at all": "",
	} {
		id, err := caps.New(t.Context(), made)
		if err != nil {
			t.Fatal(err)
		}
		right := answer(t, rdb, id)
		if err := caps.Solve(t.Context(), id, right, bind); !errors.Is(err, admission.ErrCaptcha) {
			t.Errorf("%s: %v, want ErrCaptcha", name, err)
		}
		if err := caps.Solve(t.Context(), id, right, made); !errors.Is(err, admission.ErrCaptcha) {
			t.Errorf("%s, then its own binding: %v, want ErrCaptcha (tried once)", name, err)
		}
	}
}

// The image is drawn once, when the captcha is made: showing it reads the
// PNG kept then, so it does not follow the stored digits (a GET that drew
// would) and costs no drawing however often it is asked for.
func TestCaptchaImageIsDrawnOnce(t *testing.T) {
	rdb := testkit.NewRedis(t).Client
	caps := admission.NewCaptchas(rdb, admission.CaptchaOptions{})
	id, err := caps.New(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	first, err := caps.Image(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	digits := []byte(answer(t, rdb, id))
	digits[0] = '0' + (digits[0]-'0'+1)%10
	rdb.HSet(t.Context(), "seckill:captcha:"+id, "answer", digits)
	again, err := caps.Image(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, again) {
		t.Fatal("the image changed with the stored digits: it was drawn again")
	}
}

// An address makes PerAddress captchas per TTL, and the addresses of one
// network PerNetwork between them; another network is counted apart.
func TestCaptchasPerAddressAndNetwork(t *testing.T) {
	rdb := testkit.NewRedis(t).Client
	const perAddress, perNetwork = 3, 7
	caps := admission.NewCaptchas(rdb, admission.CaptchaOptions{TTL: time.Hour, PerAddress: perAddress, PerNetwork: perNetwork})
	// A network of this run's own: the shared Redis keeps other runs' counts.
	a, b := rand.N(250), rand.N(250)
	addr := func(network, host int) netip.Addr {
		return netip.MustParseAddr(fmt.Sprintf("10.%d.%d.%d", a, b+network, host))
	}
	for i := range perAddress {
		if err := caps.Allow(t.Context(), addr(0, 1)); err != nil {
			t.Fatalf("captcha %d of %d from an address: %v", i+1, perAddress, err)
		}
	}
	if err := caps.Allow(t.Context(), addr(0, 1)); !errors.Is(err, admission.ErrRateLimited) {
		t.Fatalf("captcha %d from an address: %v, want ErrRateLimited", perAddress+1, err)
	}
	// The network has counted perAddress+1, the refused one included.
	for host := 2; host <= perNetwork-perAddress; host++ {
		if err := caps.Allow(t.Context(), addr(0, host)); err != nil {
			t.Fatalf("a captcha of the network from address %d: %v", host, err)
		}
	}
	if err := caps.Allow(t.Context(), addr(0, 200)); !errors.Is(err, admission.ErrRateLimited) {
		t.Fatalf("a fresh address past its network's quota: %v, want ErrRateLimited", err)
	}
	if err := caps.Allow(t.Context(), addr(1, 1)); err != nil {
		t.Fatalf("an address of another network: %v", err)
	}
}

func TestNetwork(t *testing.T) {
	for _, c := range []struct{ addr, want string }{
		{"203.0.113.77", "203.0.113.0/24"},
		{"::ffff:203.0.113.77", "203.0.113.0/24"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2::9", "2001:db8:1:2::/64"},
	} {
		if got := admission.Network(netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("Network(%s) = %s, want %s", c.addr, got, c.want)
		}
	}
}
