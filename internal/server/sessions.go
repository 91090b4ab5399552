package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"seckill/internal/api"
	"seckill/internal/order"
	"seckill/internal/session"
)

// Sessions signs buyers in and says whose a token is (session.Desk).
type Sessions interface {
	SignIn(ctx context.Context, name string) (session.Token, error)
	Verify(token string) (session.Buyer, error)
}

// handleSignIn is the demo sign-in: a name, no password.
func (s *Server) handleSignIn(c *gin.Context) {
	var req api.SessionRequest
	if err := s.decode(c, &req); err != nil {
		s.failErr(c, err)
		return
	}
	tok, err := s.deps.Sessions.SignIn(c.Request.Context(), req.Name)
	if err != nil {
		s.failErr(c, err)
		return
	}
	c.JSON(http.StatusCreated, api.Session{Token: tok.Token, BuyerID: tok.Buyer, Name: tok.Name, ExpiresAt: tok.Expires})
}

// buyer is who asks: the user id the body claims when it names one
// (claimed; only lab products take it, see order.Buyer.May), else the
// buyer of the request's token, else nobody. A token that does not verify
// is refused (401) rather than ignored. ok is false when the answer is
// sent.
func (s *Server) buyer(c *gin.Context, claimed *int64) (b order.Buyer, ok bool) {
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
	if !bearer || s.deps.Sessions == nil {
		s.fail(c, http.StatusUnauthorized, api.CodeSignInRequired, "send a buyer's token as Authorization: Bearer <token> (POST /api/sessions makes one)")
		return b, false
	}
	who, err := s.deps.Sessions.Verify(token)
	if err != nil {
		s.fail(c, http.StatusUnauthorized, api.CodeSignInRequired, "the buyer's token is not valid ("+err.Error()+"): sign in again with POST /api/sessions")
		return b, false
	}
	return order.Buyer{ID: who.ID, Signed: true}, true
}

// buyerOf is buyer for a purchase of product: one whom the product does
// not sell to (order.Buyer.May), or nobody on a lab product, is refused
// here. The product comes from the catalogue's cache: no round trip once
// it is there.
func (s *Server) buyerOf(c *gin.Context, product int64, claimed *int64) (order.Buyer, bool) {
	b, ok := s.buyer(c, claimed)
	if !ok {
		return b, false
	}
	p, err := s.deps.Orders.Catalogue().Product(c.Request.Context(), product)
	if err == nil {
		err = b.May(p)
	}
	if err != nil {
		s.failErr(c, err)
		return b, false
	}
	if b.ID == 0 {
		s.fail(c, http.StatusBadRequest, api.CodeBadRequest, "user_id is required on a lab product (or a signed-in buyer's Authorization: Bearer <token>)")
		return b, false
	}
	return b, true
}
