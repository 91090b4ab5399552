package server

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/go-webauthn/webauthn/protocol"

	"seckill/internal/session"
)

// Passkeys registers passkeys to accounts and signs buyers in with them
// (session.Passkeys). The bodies of the finishing calls are the browser's
// PublicKeyCredential as JSON, handed on whole.
type Passkeys interface {
	BeginRegistration(ctx context.Context, token string) (*protocol.CredentialCreation, error)
	FinishRegistration(ctx context.Context, token string, body []byte) error
	BeginSignIn(ctx context.Context) (*protocol.CredentialAssertion, error)
	FinishSignIn(ctx context.Context, body []byte) (session.Token, error)
}

// handlePasskeyBeginRegistration answers the signed-in buyer with the
// options for navigator.credentials.create.
func (s *accounts) handlePasskeyBeginRegistration(c *gin.Context) {
	opts, err := s.passkeys.BeginRegistration(c.Request.Context(), bearer(c))
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	c.JSON(http.StatusOK, opts)
}

// handlePasskeyFinishRegistration keeps the passkey the browser made.
func (s *accounts) handlePasskeyFinishRegistration(c *gin.Context) {
	var body jsontext.Value
	if err := s.e.decode(c, &body); err != nil {
		s.e.failErr(c, err)
		return
	}
	if err := s.passkeys.FinishRegistration(c.Request.Context(), bearer(c), body); err != nil {
		s.e.failErr(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// handlePasskeyBeginSignIn answers with the options for
// navigator.credentials.get: no name asked, the authenticator offers its
// passkeys for this site.
func (s *accounts) handlePasskeyBeginSignIn(c *gin.Context) {
	opts, err := s.passkeys.BeginSignIn(c.Request.Context())
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	c.JSON(http.StatusOK, opts)
}

// handlePasskeyFinishSignIn answers a verified assertion with a session,
// as POST /api/sessions does a password.
func (s *accounts) handlePasskeyFinishSignIn(c *gin.Context) {
	var body jsontext.Value
	if err := s.e.decode(c, &body); err != nil {
		s.e.failErr(c, err)
		return
	}
	tok, err := s.passkeys.FinishSignIn(c.Request.Context(), body)
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	c.JSON(http.StatusCreated, sessionOf(tok))
}
