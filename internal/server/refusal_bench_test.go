package server_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"seckill/internal/api"
	"seckill/internal/testkit/testenv"
)

// BenchmarkSoldOutRefusal is a signed-in buyer's purchase of a product
// this process knows is sold out, through the handler, beside a bare Gin
// handler that reads the same body and answers a constant 409: what the
// herd's answer costs beyond Gin's own (issue 39). In process, no network;
// testenv's backends (REDIS_ADDR and MYSQL_DSN when set); one buyer's
// token over and over, as a buyer clicking again would send.
func BenchmarkSoldOutRefusal(b *testing.B) {
	srv := startSigning(b)
	id := testenv.ProductID(b)
	p := fmt.Sprintf(`{"id":%d,"stock":1,"shards":5,"mode":"lua","lab":false}`, id)
	if rec := post(srv.Handler, "/api/products", p, srv.Config.AdminToken); rec.Code != http.StatusOK {
		b.Fatalf("creating product %d: %d %s", id, rec.Code, rec.Body)
	}
	b.Cleanup(func() { testenv.DropProductKeys(b, srv.RedisAddr(), id) })
	testenv.Accounts(b, srv, 1, 2)
	body := fmt.Sprintf(`{"product_id":%d}`, id)
	if rec := post(srv.Handler, "/api/orders", body, testenv.Token(1)); rec.Code != http.StatusCreated {
		b.Fatalf("the first purchase: %d %s", rec.Code, rec.Body)
	}
	token := testenv.Token(2)
	b.Run("service", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if rec := post(srv.Handler, "/api/orders", body, token); rec.Code != http.StatusConflict {
				b.Fatalf("a refusal: %d %s", rec.Code, rec.Body)
			}
		}
	})
	b.Run("bare", func(b *testing.B) {
		r := gin.New()
		r.POST("/api/orders", func(c *gin.Context) {
			var in struct {
				ProductID int64 `json:"product_id"`
			}
			if err := c.ShouldBindJSON(&in); err != nil {
				c.JSON(http.StatusBadRequest, api.Error{Code: api.CodeBadRequest, Error: err.Error()})
				return
			}
			c.JSON(http.StatusConflict, api.Error{Code: api.CodeSoldOut, Error: "sold out"})
		})
		b.ReportAllocs()
		for b.Loop() {
			if rec := post(r, "/api/orders", body, token); rec.Code != http.StatusConflict {
				b.Fatalf("a refusal: %d %s", rec.Code, rec.Body)
			}
		}
	})
}
