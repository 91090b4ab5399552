package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"seckill/internal/admission"
	"seckill/internal/api"
	"seckill/internal/order"
	"seckill/internal/session"
)

// Sessions makes accounts, signs buyers in and out, and says whose a
// token is (session.Desk).
type Sessions interface {
	Create(ctx context.Context, name, password string) (session.Buyer, error)
	SignIn(ctx context.Context, addr, name, password string) (session.Token, error)
	Bulk(ctx context.Context, names []string) ([]session.Token, error)
	Verify(ctx context.Context, token string) (session.Buyer, error)
	Current(ctx context.Context, token string) (session.Buyer, time.Time, error)
	SignOut(ctx context.Context, token string) error
	ChangePassword(ctx context.Context, addr, token, password, fresh string) error
	Demo() bool
}

// Signups bounds the accounts made per address and network
// (session.Signups).
type Signups interface {
	Check(ctx context.Context, addr netip.Addr, solved bool) error
	Made(ctx context.Context, addr netip.Addr) error
}

// maxBulk bounds the names of one bulk creation: a body of about 50 kB.
const maxBulk = 1000

// handleCreateAccount makes an account with a password, within the
// address's and its network's limits, with a captcha past the first few.
func (s *accounts) handleCreateAccount(c *gin.Context) {
	var req api.AccountRequest
	if err := s.e.decode(c, &req); err != nil {
		s.e.failErr(c, err)
		return
	}
	ctx := c.Request.Context()
	addr, err := netip.ParseAddr(c.ClientIP())
	if err != nil {
		s.e.fail(c, http.StatusBadRequest, api.CodeBadRequest, "the client's address is not an IP address")
		return
	}
	solved := false
	if req.CaptchaID != "" && s.captchas != nil {
		if err := s.captchas.Solve(ctx, req.CaptchaID, req.Captcha, admission.AccountBinding(admission.Network(addr))); err != nil {
			s.e.failErr(c, err)
			return
		}
		solved = true
	}
	if s.signups != nil {
		if err := s.signups.Check(ctx, addr, solved); err != nil {
			s.e.failErr(c, err)
			return
		}
	}
	b, err := s.sessions.Create(ctx, req.Name, req.Password)
	if err == nil && s.signups != nil {
		err = s.signups.Made(ctx, addr)
	}
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	c.JSON(http.StatusCreated, api.Account{BuyerID: b.ID, Name: b.Name})
}

// handleSignIn signs a buyer in with a name and password, or by name
// alone when demo accounts are on.
func (s *accounts) handleSignIn(c *gin.Context) {
	var req api.SessionRequest
	if err := s.e.decode(c, &req); err != nil {
		s.e.failErr(c, err)
		return
	}
	tok, err := s.sessions.SignIn(c.Request.Context(), c.ClientIP(), req.Name, req.Password)
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	c.JSON(http.StatusCreated, sessionOf(tok))
}

func sessionOf(tok session.Token) api.Session {
	return api.Session{Token: tok.Token, BuyerID: tok.Buyer, Name: tok.Name, ExpiresAt: tok.Expires}
}

// handleBulkAccounts is the operator's: buyers without a password, each
// with a session, for a load run's thousands of buyers.
func (s *accounts) handleBulkAccounts(c *gin.Context) {
	var req api.BulkAccounts
	if err := s.e.decode(c, &req); err != nil {
		s.e.failErr(c, err)
		return
	}
	if len(req.Names) == 0 || len(req.Names) > maxBulk {
		s.e.fail(c, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("names must hold 1 to %d names, not %d", maxBulk, len(req.Names)))
		return
	}
	toks, err := s.sessions.Bulk(c.Request.Context(), req.Names)
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	out := api.BulkSessions{Sessions: make([]api.Session, len(toks))}
	for i, t := range toks {
		out.Sessions[i] = sessionOf(t)
	}
	c.JSON(http.StatusCreated, out)
}

// handleAccountOptions tells the page which sign-ins there are.
func (s *accounts) handleAccountOptions(c *gin.Context) {
	c.JSON(http.StatusOK, api.AccountOptions{Demo: s.sessions.Demo(), MinPassword: session.MinPassword,
		Passkeys: s.passkeys != nil, PasskeyOrigins: s.passkeyOrigins})
}

// handleCurrentSession says whose the token is, and until when.
func (s *accounts) handleCurrentSession(c *gin.Context) {
	b, exp, err := s.sessions.Current(c.Request.Context(), bearer(c))
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	c.JSON(http.StatusOK, api.CurrentSession{BuyerID: b.ID, Name: b.Name, ExpiresAt: exp})
}

// handleSignOut ends the token's session on every instance.
func (s *accounts) handleSignOut(c *gin.Context) {
	if err := s.sessions.SignOut(c.Request.Context(), bearer(c)); err != nil {
		s.e.failErr(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// handleChangePassword sets a new password and ends every session of the
// account.
func (s *accounts) handleChangePassword(c *gin.Context) {
	var req api.PasswordChange
	if err := s.e.decode(c, &req); err != nil {
		s.e.failErr(c, err)
		return
	}
	if err := s.sessions.ChangePassword(c.Request.Context(), c.ClientIP(), bearer(c), req.Password, req.NewPassword); err != nil {
		s.e.failErr(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// buyer is who asks: the user id the body claims when it names one
// (claimed; only lab products take it, see order.Buyer.May), else the
// buyer of the request's token, else nobody. A token that does not verify
// is refused (401) rather than ignored. ok is false when the answer is
// sent.
func (s *edge) buyer(c *gin.Context, claimed *int64) (b order.Buyer, ok bool) {
	if claimed != nil {
		if id := *claimed; id <= 0 || id >= api.FirstNamedBuyer {
			s.fail(c, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf(
				"user_id must be a positive integer below %d (the ids from there on are signed-in buyers': sign in with POST /api/sessions and send Authorization: Bearer <token>)", api.FirstNamedBuyer))
			return b, false
		}
		return order.Buyer{ID: *claimed}, true
	}
	header := c.GetHeader("Authorization")
	if header == "" {
		return b, true
	}
	token, bearer := strings.CutPrefix(header, "Bearer ")
	if !bearer || s.sessions == nil {
		s.fail(c, http.StatusUnauthorized, api.CodeSignInRequired, "send a buyer's token as Authorization: Bearer <token> (POST /api/sessions makes one)")
		return b, false
	}
	who, err := s.sessions.Verify(c.Request.Context(), token)
	switch {
	case errors.Is(err, session.ErrInvalid):
		s.fail(c, http.StatusUnauthorized, api.CodeSignInRequired, "the buyer's token is not valid ("+err.Error()+"): sign in again with POST /api/sessions")
		return b, false
	case err != nil: // no account (401 no_account), or it or the revocation could not be read
		s.failErr(c, err)
		return b, false
	}
	return order.Buyer{ID: who.ID, Signed: true, Created: who.Created}, true
}

// buyerOf is buyer for a purchase of product: one whom the product does
// not sell to (order.Buyer.May), or nobody on a lab product, is refused
// here. The product comes from the catalogue's cache: no round trip once
// it is there. One the process does not know (catalogue.Known: not read
// yet, or no such product) is read only inside the client address's rate,
// counted here first (counted true; the purchase counts no more): a client
// naming products that do not exist reaches SQL at that rate at most.
func (s *shop) buyerOf(c *gin.Context, product int64, claimed *int64) (b order.Buyer, counted, ok bool) {
	cat := s.cat
	if _, known := cat.Known(product); !known {
		if !s.e.allowAddress(c) {
			return b, false, false
		}
		counted = true
	}
	if b, ok = s.e.buyer(c, claimed); !ok {
		return b, counted, false
	}
	p, err := cat.Product(c.Request.Context(), product)
	if err == nil {
		err = b.MayBuy(p)
	}
	if err != nil {
		s.e.failErr(c, err)
		return b, counted, false
	}
	if b.ID == 0 {
		s.e.fail(c, http.StatusBadRequest, api.CodeBadRequest, "user_id is required on a lab product (or a signed-in buyer's Authorization: Bearer <token>)")
		return b, counted, false
	}
	return b, counted, true
}
