package server

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"seckill/internal/admission"
	"seckill/internal/api"
	"seckill/internal/order"
)

// botRoutes are the routes that keep bots out: captchas and purchase
// path tokens.
type botRoutes struct{ *Server }

// perAddress limits a public route per client address. The client is the
// connection's peer, or the X-Forwarded-For of a trusted proxy.
func (s *Server) perAddress(c *gin.Context) {
	if s.deps.PerAddress == nil {
		return
	}
	if err := s.deps.PerAddress.Allow(c.Request.Context(), c.ClientIP()); err != nil {
		s.failErr(c, err)
		c.Abort()
	}
}

// handleNewCaptcha makes a captcha, for a path token of a product that asks
// for one.
func (s botRoutes) handleNewCaptcha(c *gin.Context) {
	if s.deps.Captchas == nil {
		s.fail(c, http.StatusServiceUnavailable, api.CodeUnavailable, "this service makes no captchas")
		return
	}
	id, err := s.deps.Captchas.New(c.Request.Context())
	if err != nil {
		s.failErr(c, err)
		return
	}
	c.JSON(http.StatusCreated, api.Captcha{ID: id, Image: "/api/captcha/" + id})
}

// handleCaptchaImage draws a captcha as a PNG.
func (s botRoutes) handleCaptchaImage(c *gin.Context) {
	if s.deps.Captchas == nil {
		s.fail(c, http.StatusNotFound, api.CodeNotFound, "this service makes no captchas")
		return
	}
	var img bytes.Buffer
	err := s.deps.Captchas.WriteImage(c.Request.Context(), &img, c.Param("id"))
	if errors.Is(err, admission.ErrNoCaptcha) {
		s.fail(c, http.StatusNotFound, api.CodeNotFound, "no such captcha: it expired or was tried; ask POST /api/captcha for another")
		return
	}
	if err != nil {
		s.failErr(c, err)
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Data(http.StatusOK, "image/png", img.Bytes())
}

// handleIssuePath gives the signed-in buyer a one-time purchase path token
// for the product (order.Service.IssuePath says when). The body, when the
// product asks for a captcha, is the solved one.
func (s botRoutes) handleIssuePath(c *gin.Context) {
	product, ok := s.pathID(c, "product")
	if !ok {
		return
	}
	var req api.PathRequest
	if c.Request.ContentLength != 0 {
		if err := s.decode(c, &req); err != nil {
			s.failErr(c, err)
			return
		}
	}
	b, ok := s.buyer(c, nil)
	if !ok {
		return
	}
	if !b.Signed {
		s.failErr(c, fmt.Errorf("%w: a purchase path is a signed-in buyer's: sign in (POST /api/sessions) and send Authorization: Bearer <token>", order.ErrSignIn))
		return
	}
	tok, err := s.deps.Orders.Door().IssuePath(c.Request.Context(), order.PathRequest{Buyer: b.ID, Product: product,
		CaptchaID: req.CaptchaID, Captcha: req.Captcha})
	if err != nil {
		s.failErr(c, err)
		return
	}
	c.JSON(http.StatusCreated, api.Path{Token: tok.Token, ExpiresAt: tok.Expires})
}
