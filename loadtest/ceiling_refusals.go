package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"seckill/internal/api"
	"seckill/internal/lab/harness"
)

// refusalTarget is what the service's sold-out refusals to signed-in
// buyers should reach: this share of the requests per second of a bare Gin
// handler that reads the body and answers a constant 409, in the same run
// (issue 39).
const refusalTarget = 0.80

// refusalBuyers are the signed-in buyers the refusals go to, in turn: a
// herd, not one buyer whose token and keys stay in every cache.
const refusalBuyers = 2000

// refusalMode is the refusals' product's, whatever -mode is: a refusal of
// a sold-out product is the same answer in every mode, and a public
// product in the async mode needs a Redis that keeps its writes
// (appendonly; 409 not_durable otherwise), which neither the embedded one
// nor a scratch one is.
const refusalMode = api.ModeLua

// bareRefusePrefix is the bare handler's route of a constant refusal.
const bareRefusePrefix = "/refuse"

// bareRefuse binds the body as the bare purchases do and answers 409
// sold_out: what a refusal costs Gin and JSON with no work of its own.
func bareRefuse(c *gin.Context) {
	var in bareOrder
	if err := c.ShouldBindJSON(&in); err != nil {
		c.JSON(http.StatusBadRequest, api.Error{Code: api.CodeBadRequest, Error: err.Error()})
		return
	}
	c.JSON(http.StatusConflict, api.Error{Code: api.CodeSoldOut, Error: "sold out"})
}

// refusals are -ceiling's sold-out refusals: the service's, to signed-in
// buyers of a public product sold out before the rounds, and the bare
// handler's constant 409 to the same requests.
type refusals struct {
	product int64
	mode    string // the product's
	signed  []api.Session
	// service and bare are the two sides; rows are their rounds' rows.
	service, bare         ceilingSide
	serviceRows, bareRows []harness.Row
}

// prepareRefusals signs refusalBuyers buyers in, and one more who buys the
// only unit of product, a public product sold in refusalMode; one more
// purchase must then be refused sold_out, as every one of the rounds' is.
func (r *ceilingRun) prepareRefusals(ctx context.Context, product int64, admin string, stderr io.Writer) (*refusals, error) {
	t := openingTarget{client: r.client, base: r.c.URLs[0], token: admin}
	run := "ceiling-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	fmt.Fprintf(stderr, "signing %d buyers in for the sold-out refusals\n", refusalBuyers+1)
	buyers, err := t.signIn(ctx, run, refusalBuyers+1, newProgressBar(stderr))
	for _, b := range buyers {
		if b.id != 0 { // made, before an error stopped the others
			r.accounts = append(r.accounts, b.id)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("signing the refusals' buyers in: %w", err)
	}
	one := 1
	req := api.ProductRequest{ID: &product, Name: "ceiling refusals", Stock: &one, Mode: refusalMode}
	r.products = append(r.products, product)
	if st, code, err := t.call(ctx, http.MethodPost, "/api/products", admin, req, nil); err != nil || st != http.StatusOK {
		return nil, fmt.Errorf("creating the refusals' product %d: %d %s %v", product, st, code, err)
	}
	buy := api.OrderRequest{ProductID: &product}
	if st, code, err := t.call(ctx, http.MethodPost, "/api/orders", buyers[refusalBuyers].token, buy, nil); err != nil || st != http.StatusCreated {
		return nil, fmt.Errorf("buying the refusals' product %d: %d %s %v", product, st, code, err)
	}
	f := &refusals{product: product, mode: refusalMode,
		service: ceilingSide{name: "service sold-out refusals", mode: refusalMode, target: refusalTarget},
		bare:    ceilingSide{name: "bare 409"}}
	for _, b := range buyers[:refusalBuyers] {
		f.signed = append(f.signed, api.Session{BuyerID: b.id, Token: b.token})
	}
	if st, code, err := t.call(ctx, http.MethodPost, "/api/orders", buyers[0].token, buy, nil); err != nil ||
		st != http.StatusConflict || code != api.CodeSoldOut {
		return nil, fmt.Errorf("product %d after its unit was sold: %d %s %v, want 409 %s", product, st, code, err, api.CodeSoldOut)
	}
	return f, nil
}

// refusalRound drives the service's refusals, then the bare handler's,
// with load's workers and length; every answer must be 409 sold_out, or
// the rate is not a refusal's.
func (r *ceilingRun) refusalRound(ctx context.Context, stdout io.Writer, round int, load harness.Spec) error {
	f := r.refusals
	for _, side := range []struct {
		s      *ceilingSide
		rows   *[]harness.Row
		target string
	}{{&f.service, &f.serviceRows, r.c.URLs[0]}, {&f.bare, &f.bareRows, r.bare + bareRefusePrefix}} {
		s := load
		s.Targets, s.ProductID, s.Signed, s.Buyers, s.Requests = []string{side.target}, f.product, f.signed, 0, 1<<30
		row, err := harness.Drive(ctx, s, nil)
		if err != nil {
			return fmt.Errorf("round %d, %s: %w", round+1, side.s.name, err)
		}
		if row.Requests == 0 || row.SoldOut != row.Requests {
			return fmt.Errorf("round %d, %s: %d of %d answers were not 409 %s (%v %v): the comparison needs every one to be",
				round+1, side.s.name, row.Requests-row.SoldOut, row.Requests, api.CodeSoldOut, row.ErrorCodes, row.ErrorSamples)
		}
		side.s.rps = append(side.s.rps, row.RPS)
		*side.rows = append(*side.rows, row)
		fmt.Fprintf(stdout, "round %d %-27s %6.0f req/s (%d requests, all 409 %s, p50 %.2fms, p99 %.2fms)\n",
			round+1, side.s.name+":", row.RPS, row.Requests, api.CodeSoldOut, row.P50MS, row.P99MS)
	}
	return nil
}

// print prints the two sides' medians and their ratio against its
// target.
func (f *refusals) print(stdout io.Writer) error {
	svc, bare := harness.Median(f.service.rps), harness.Median(f.bare.rps)
	if bare == 0 {
		return fmt.Errorf("the bare 409 handler served nothing")
	}
	target := "meets"
	if svc < f.service.target*bare {
		target = "BELOW"
	}
	fmt.Fprintf(stdout, "  %-26s %6.0f req/s (a %s product sold out, %d signed-in buyers)\n", f.service.name, svc, f.mode, len(f.signed))
	fmt.Fprintf(stdout, "  %-26s %6.0f req/s; %s / this = %.0f%% (%s the %.0f%% target)\n",
		f.bare.name, bare, f.service.name, 100*svc/bare, target, 100*f.service.target)
	return nil
}

// note says what the refusals' sides send and do.
func (f *refusals) note(stdout io.Writer) {
	fmt.Fprintf(stdout, "note: %s are POSTs from %d signed-in buyers in turn (Authorization: Bearer <token>, the body naming the product only) "+
		"for a public %s product whose one unit was sold before the rounds; %s reads the same requests' bodies and answers a constant 409 %s, nothing else.\n",
		f.service.name, len(f.signed), f.mode, f.bare.name, api.CodeSoldOut)
}
