package order

import (
	"context"
	"fmt"

	"seckill/internal/admission"
	"seckill/internal/catalogue"
)

// PathRequest asks for a purchase path token: a buyer's, for a product,
// with the captcha solved when the product asks for one.
type PathRequest struct {
	Buyer, Product     int64
	CaptchaID, Captcha string
}

// IssuePath gives a buyer a one-time token for a purchase of a product that
// asks for one (Product.Path): from the opening second only, like the
// purchase itself, so that a bot cannot stock up on tokens before it, and
// for a solved captcha when the product asks for one.
func (s *Service) IssuePath(ctx context.Context, in PathRequest) (admission.PathToken, error) {
	if in.Buyer <= 0 || in.Product <= 0 {
		return admission.PathToken{}, fmt.Errorf("%w: the buyer and product ids must be positive integers", ErrInvalid)
	}
	p, err := s.cat.Product(ctx, in.Product)
	if err != nil {
		return admission.PathToken{}, err
	}
	if err := s.pathFor(p); err != nil {
		return admission.PathToken{}, err
	}
	if err := s.window(p); err != nil {
		return admission.PathToken{}, err
	}
	if p.Captcha {
		if s.opt.Captchas == nil {
			return admission.PathToken{}, fmt.Errorf("%w: product %d asks for a captcha and this service checks none", ErrNoPaths, p.ID)
		}
		if err := s.opt.Captchas.Verify(ctx, in.CaptchaID, in.Captcha); err != nil {
			return admission.PathToken{}, err
		}
	}
	return s.opt.Paths.Issue(ctx, in.Buyer, p.ID)
}

// pathFor says whether p's purchases take path tokens this service issues.
func (s *Service) pathFor(p catalogue.Product) error {
	switch {
	case !p.Path:
		return fmt.Errorf("%w: product %d sells without a purchase path: buy it directly", ErrInvalid, p.ID)
	case s.opt.Paths == nil:
		return fmt.Errorf("%w: product %d asks for a purchase path and this service issues none", ErrNoPaths, p.ID)
	}
	return nil
}
