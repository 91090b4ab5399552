package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"

	"github.com/gin-gonic/gin"

	"seckill/internal/admission"
	"seckill/internal/api"
	"seckill/internal/order"
)

// botRoutes are the routes that keep bots out: captchas and purchase
// path tokens.
type botRoutes struct {
	e        *edge
	captchas Captchas
	door     Door
}

// perAddress limits a public route per client address. The client is the
// connection's peer, or the X-Forwarded-For of a trusted proxy.
func (s *edge) perAddress(c *gin.Context) {
	if !s.allowAddress(c) {
		c.Abort()
	}
}

// allowAddress counts a request in its client address's rate; ok is false
// when it is refused, the answer (429) sent.
func (s *edge) allowAddress(c *gin.Context) (ok bool) {
	if s.perAddr == nil {
		return true
	}
	if err := s.perAddr.Allow(c.Request.Context(), c.ClientIP()); err != nil {
		s.failErr(c, err)
		return false
	}
	return true
}

// allowProductRead lets a read about product id in: free on a lab product
// this process knows (the lab's harness polls its audits and looks up its
// orders from one address), any other inside the client address's rate,
// counted before anything reads SQL: a product not known, or none, is
// read only then. ok is false when it is refused, the answer sent.
func (s *shop) allowProductRead(c *gin.Context, id int64) (ok bool) {
	if lab, known := s.cat.Known(id); known && lab {
		return true
	}
	return s.e.allowAddress(c)
}

// handleNewCaptcha makes a captcha bound to what it is for: a signed-in
// buyer's purchase path of a product (order.Door.NewCaptcha says when), or
// an account made from the client's network. Each client address and
// network makes a bounded number (admission.Captchas.Allow).
func (s botRoutes) handleNewCaptcha(c *gin.Context) {
	if s.captchas == nil {
		s.e.fail(c, http.StatusServiceUnavailable, api.CodeUnavailable, "this service makes no captchas")
		return
	}
	var req api.CaptchaRequest
	if err := s.e.decode(c, &req); err != nil {
		s.e.failErr(c, err)
		return
	}
	ctx := c.Request.Context()
	client := clientAddr(c)
	var bind string
	switch {
	case req.For == api.CaptchaForAccount && req.ProductID == 0:
		bind = admission.AccountBinding(admission.Network(client))
	case req.For == "" && req.ProductID > 0:
		b, ok := s.e.buyer(c, nil)
		if !ok {
			return
		}
		if !b.Signed {
			s.e.failErr(c, fmt.Errorf("%w: a product's captcha is a signed-in buyer's: sign in (POST /api/sessions) and send Authorization: Bearer <token>", order.ErrSignIn))
			return
		}
		var err error
		if bind, err = s.door.CaptchaBinding(ctx, b.ID, req.ProductID); err != nil {
			s.e.failErr(c, err)
			return
		}
	default:
		s.e.fail(c, http.StatusBadRequest, api.CodeBadRequest, `say what the captcha is for: {"product_id": N} (a positive integer) for a product's purchase path, or {"for": "account"}`)
		return
	}
	// Counted once it would be made: a page that asks before the opening,
	// or before its buyer signs in, spends none of its quota.
	if err := s.captchas.Allow(ctx, client); err != nil {
		s.e.failErr(c, err)
		return
	}
	id, err := s.captchas.New(ctx, bind)
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	c.JSON(http.StatusCreated, api.Captcha{ID: id, Image: "/api/captcha/" + id})
}

// clientAddr is the client's address as the server knows it (gin's
// ClientIP: the peer, or a trusted proxy's X-Forwarded-For).
func clientAddr(c *gin.Context) netip.Addr {
	addr, _ := netip.ParseAddr(c.ClientIP()) // the zero Addr, its own network, if gin knows none
	return addr.Unmap()
}

// handleCaptchaImage sends a captcha's PNG, drawn when it was made.
func (s botRoutes) handleCaptchaImage(c *gin.Context) {
	if s.captchas == nil {
		s.e.fail(c, http.StatusNotFound, api.CodeNotFound, "this service makes no captchas")
		return
	}
	png, err := s.captchas.Image(c.Request.Context(), c.Param("id"))
	if errors.Is(err, admission.ErrNoCaptcha) {
		s.e.fail(c, http.StatusNotFound, api.CodeNotFound, "no such captcha: it expired or was tried; ask POST /api/captcha for another")
		return
	}
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Data(http.StatusOK, "image/png", png)
}

// handleIssuePath gives the signed-in buyer a one-time purchase path token
// for the product (order.Service.IssuePath says when). The body, when the
// product asks for a captcha, is the solved one.
func (s botRoutes) handleIssuePath(c *gin.Context) {
	product, ok := s.e.pathID(c, "product")
	if !ok {
		return
	}
	var req api.PathRequest
	if c.Request.ContentLength != 0 {
		if err := s.e.decode(c, &req); err != nil {
			s.e.failErr(c, err)
			return
		}
	}
	b, ok := s.e.buyer(c, nil)
	if !ok {
		return
	}
	if !b.Signed {
		s.e.failErr(c, fmt.Errorf("%w: a purchase path is a signed-in buyer's: sign in (POST /api/sessions) and send Authorization: Bearer <token>", order.ErrSignIn))
		return
	}
	tok, err := s.door.IssuePath(c.Request.Context(), order.PathRequest{Buyer: b.ID, Product: product,
		CaptchaID: req.CaptchaID, Captcha: req.Captcha})
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	c.JSON(http.StatusCreated, api.Path{Token: tok.Token, ExpiresAt: tok.Expires})
}
