package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"seckill/internal/api"
)

// The pay-vs-timeout race: a product with a payment window, orders whose
// payments arrive around the window's end, and the service's delay queue
// cancelling the unpaid ones at the same instants. Exactly one of the
// payment and the timeout must win each order: a unit paid for and also
// returned to the store will be sold twice. The harness learns each
// payment's outcome from its answer (200 paid, 409 order_cancelled) and the
// rest from the audit once every window has ended and the queue has caught
// up.

// settleTimeout bounds the wait, after the last payment, for the service to
// cancel every order still unpaid.
const settleTimeout = 30 * time.Second

// bought is one order the race's purchases made.
type bought struct {
	api.Order
	user int64
}

// payTally is what the race's answers said.
type payTally struct {
	bought                  []bought
	soldOut, already        int
	paid, refused, payFails int
	codes                   map[string]int
	samples                 []string
}

func (t *payTally) fail(err error) {
	var r *refusal
	code := "transport"
	if errors.As(err, &r) {
		code = r.code
	}
	t.codes[code]++
	if msg := err.Error(); len(t.samples) < maxSamples && !strings.Contains(strings.Join(t.samples, "\n"), msg) {
		t.samples = append(t.samples, msg)
	}
}

// payRace runs the race on the product reset for spec: the purchases, the
// payments at each order's window's end, the wait for the timeouts, the
// audit and the verdict. Timing (latency, throughput) is not the point.
func payRace(ctx, runCtx context.Context, c *http.Client, spec Spec) (Row, error) {
	row := newRow(spec)
	start := time.Now()
	t := payTally{codes: make(map[string]int)}
	buyAll(runCtx, c, spec, &t)
	last := time.Now()
	for _, b := range t.bought {
		if b.DueAt == nil {
			return row, fmt.Errorf("order %s has no due_at: the service gave product %d no payment window", b.ID, spec.ProductID)
		}
		last = maxTime(last, *b.DueAt)
	}
	payAll(runCtx, c, spec, &t)
	row.ElapsedS = time.Since(start).Seconds()
	row.OK, row.SoldOut, row.AlreadyBought = len(t.bought), t.soldOut, t.already
	row.PaidOK, row.PayRefused = t.paid, t.refused
	for _, n := range t.codes {
		row.Errors += n // the purchases' and the payments'
	}
	row.Requests = row.OK + row.SoldOut + row.AlreadyBought + row.Errors - t.payFails
	if len(t.codes) > 0 {
		row.ErrorCodes, row.ErrorSamples = t.codes, t.samples
	}
	if ctx.Err() != nil {
		row.Note = "cancelled"
		return row, ctx.Err()
	}

	// Every window has ended: wait until the service cancelled what is
	// still unpaid (its delay queue polls; a claim may wait out a lease).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Until(last)+settleTimeout)
	defer cancel()
	a, err := settled(sctx, c, spec)
	if err != nil {
		row.Verdict, row.Note = Errors, err.Error()
		return row, err
	}
	j := judgePayments(len(t.bought), row.PaidOK, row.Errors, spec.Stock, a)
	row.Sold = a.Orders
	row.Oversold, row.LostUpdates, row.PaidAndReturned = j.Oversold, j.LostUpdates, j.Oversold
	row.Verdict, row.HarnessVerdict, row.AuditVerdict = j.Verdict, j.Harness, j.Audit
	row.ServiceVerdict, row.Agree, row.Disagreements = a.Verdict, j.Agree, j.Disagreements
	return row, nil
}

// buyAll buys one unit for each buyer, Concurrency at a time, and keeps the
// orders the answers carry.
func buyAll(ctx context.Context, c *http.Client, spec Spec, t *payTally) {
	var mu sync.Mutex
	next := make(chan int64)
	var wg sync.WaitGroup
	for range min(spec.Concurrency, spec.Buyers) {
		wg.Go(func() {
			for user := range next {
				var o api.Order
				body := api.OrderRequest{UserID: &user, ProductID: &spec.ProductID}
				err := call(ctx, c, http.MethodPost, spec.Targets[0]+"/api/orders", "", body, &o)
				mu.Lock()
				switch {
				case err == nil:
					t.bought = append(t.bought, bought{Order: o, user: user})
				case refused(err, api.CodeSoldOut):
					t.soldOut++
				case refused(err, api.CodeAlreadyBought):
					t.already++
				default:
					t.fail(err)
				}
				mu.Unlock()
			}
		})
	}
	for i := range spec.Buyers {
		select {
		case next <- spec.UserBase + 1 + int64(i):
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
}

// payAll pays every order at its due_at plus a jitter drawn within
// ±PayJitter, each from a goroutine of its own that waits for its instant.
func payAll(ctx context.Context, c *http.Client, spec Spec, t *payTally) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	jitter := time.Duration(spec.PayJitter)
	for _, b := range t.bought {
		at := b.DueAt.Add(time.Duration(rand.Int64N(int64(2*jitter)+1)) - jitter)
		wg.Go(func() {
			timer := time.NewTimer(time.Until(at))
			defer timer.Stop()
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			url := spec.Targets[0] + "/api/orders/" + b.ID + "/pay"
			err := call(ctx, c, http.MethodPost, url, "", api.BuyerRequest{UserID: &b.user}, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				t.paid++
			case refused(err, api.CodeOrderCancelled):
				t.refused++
			default:
				t.payFails++
				t.fail(err)
			}
		})
	}
	wg.Wait()
}

// settled polls the audit until no order of the sale is unpaid and every
// take is settled: a cancel commits in SQL first, then returns its unit.
func settled(ctx context.Context, c *http.Client, spec Spec) (api.Audit, error) {
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		a, err := fetchAudit(ctx, c, spec.Targets[0], spec.ProductID)
		if err == nil && a.Unpaid == 0 && a.Unsettled == 0 {
			return a, nil
		}
		select {
		case <-ctx.Done():
			return a, fmt.Errorf("orders still unpaid after their windows ended (audit %+v, %v): %w", a, err, ctx.Err())
		case <-poll.C:
		}
	}
}

// judgePayments gives the race's verdict. A unit both paid for and back on
// sale is OVERSOLD: the audit counts the paid rows whose unit went back
// (lost updates), and the payments answered 200 whose order ended cancelled
// show as more 200s than paid rows. From its answers alone the harness sees
// only its errors.
func judgePayments(orders, paidOK, errs, stock int, a api.Audit) Judgement {
	both := max(0, a.LostUpdates) + max(0, paidOK-a.Paid)
	j := Judgement{Oversold: both, LostUpdates: a.LostUpdates, Harness: classify(0, 0, 0, errs)}
	j.Audit = classify(both, 0, 0, errs)
	if a.LostUpdates < 0 {
		j.Audit = Lost
	}
	j.Verdict = worst(j.Harness, j.Audit)
	if a.Initial != stock {
		j.Disagreements = append(j.Disagreements, fmt.Sprintf("the audit's initial stock is %d, the harness set %d", a.Initial, stock))
	}
	if n := a.Paid + a.Cancelled; n != orders {
		j.Disagreements = append(j.Disagreements, fmt.Sprintf("the harness bought %d orders, the audit has %d paid and cancelled", orders, n))
	}
	if a.Paid > paidOK {
		j.Disagreements = append(j.Disagreements, fmt.Sprintf("the audit has %d orders paid, the harness was told of %d payments", a.Paid, paidOK))
	}
	j.Agree = len(j.Disagreements) == 0
	return j
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
