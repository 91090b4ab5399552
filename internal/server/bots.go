package server

import (
	"bytes"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"seckill/internal/admission"
	"seckill/internal/api"
)

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
func (s *Server) handleNewCaptcha(c *gin.Context) {
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
func (s *Server) handleCaptchaImage(c *gin.Context) {
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
