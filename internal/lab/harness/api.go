package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"seckill/internal/api"
)

// ErrRejected: the service refused the run's settings with 400, typically a
// lock strategy or fault option it does not know (yet).
var ErrRejected = errors.New("harness: rejected by the service")

// maxBody bounds what the harness reads of any response.
const maxBody = 1 << 20

// call sends one JSON request and decodes a 2xx answer into out (if not
// nil). A non-2xx answer becomes an error carrying the status and the
// service's message; a 400 also matches ErrRejected.
func call(ctx context.Context, c *http.Client, method, url, token string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encoding the request to %s: %w", url, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return fmt.Errorf("building %s %s: %w", method, url, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", api.MediaType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err // already says method and URL
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("reading %s %s: %w", method, url, err)
	}
	if resp.StatusCode/100 != 2 {
		var e api.Error
		_ = json.Unmarshal(b, &e) // an answer that is not the service's error has no code
		var err error = &refusal{code: e.Code, msg: fmt.Sprintf("%s %s: %s", method, url, describe(resp.StatusCode, b))}
		if resp.StatusCode == http.StatusBadRequest {
			err = fmt.Errorf("%w: %w", ErrRejected, err)
		}
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decoding the answer of %s %s: %w", method, url, err)
	}
	return nil
}

// refusal is a non-2xx answer, with the service's error code.
type refusal struct{ code, msg string }

func (r *refusal) Error() string { return r.msg }

// refused reports whether err is an answer with the error code code.
func refused(err error, code string) bool {
	var r *refusal
	return errors.As(err, &r) && r.code == code
}

// describe turns an error answer into "409 sold_out: message".
func describe(status int, body []byte) string {
	var e api.Error
	if json.Unmarshal(body, &e) == nil && (e.Code != "" || e.Error != "") {
		return strconv.Itoa(status) + " " + e.Code + ": " + e.Error
	}
	if len(body) > 200 {
		body = body[:200]
	}
	return strconv.Itoa(status) + " " + http.StatusText(status) + ": " + string(bytes.TrimSpace(body))
}

func reset(ctx context.Context, c *http.Client, s Spec) error {
	// Lab: the harness's products take the per-request lock, mode, hold
	// and faults, which the service honours on lab products only.
	body := api.ProductRequest{
		ID: &s.ProductID, Name: "harness", Stock: &s.Stock,
		Lock: s.Lock, Mode: s.Mode, Fallback: s.Fallback, Lab: true,
		PayTimeoutMS: time.Duration(s.PayTimeout).Milliseconds(), Lifecycle: s.Lifecycle,
	}
	if s.Shards != 0 { // 0 is the service's default, which an absent field asks for
		body.Shards = &s.Shards
	}
	if err := call(ctx, c, http.MethodPost, s.Targets[0]+"/api/products", s.AdminToken, body, nil); err != nil {
		return fmt.Errorf("resetting product %d: %w", s.ProductID, err)
	}
	return nil
}

func fetchAudit(ctx context.Context, c *http.Client, target string, product int64) (api.Audit, error) {
	var a api.Audit
	url := target + "/api/products/" + strconv.FormatInt(product, 10) + "/audit"
	if err := call(ctx, c, http.MethodGet, url, "", nil, &a); err != nil {
		return a, fmt.Errorf("auditing product %d: %w", product, err)
	}
	return a, nil
}

// Locks lists the lock strategies the service at target has registered, in
// its teaching order.
func Locks(ctx context.Context, c *http.Client, target string) ([]api.LockInfo, error) {
	var ls []api.LockInfo
	if err := call(ctx, c, http.MethodGet, target+"/api/locks", "", nil, &ls); err != nil {
		return nil, fmt.Errorf("listing lock strategies: %w", err)
	}
	return ls, nil
}

// CheckHealth returns the service's /healthz.
func CheckHealth(ctx context.Context, c *http.Client, target string) (api.Health, error) {
	var h api.Health
	if err := call(ctx, c, http.MethodGet, target+"/healthz", "", nil, &h); err != nil {
		return h, fmt.Errorf("checking health: %w", err)
	}
	return h, nil
}

// reconcilePoll is how often reconcile asks again while takes are pending
// or another process holds the reconciler's lease.
const reconcilePoll = 100 * time.Millisecond

// reconcile runs the reconciler on the product until a pass leaves no take
// pending: every take is then in an order, or its unit went back.
func reconcile(ctx context.Context, c *http.Client, s Spec) error {
	url := s.Targets[0] + "/api/products/" + strconv.FormatInt(s.ProductID, 10) + "/reconcile"
	t := time.NewTicker(reconcilePoll)
	defer t.Stop()
	for {
		var r api.Reconciliation
		err := call(ctx, c, http.MethodPost, url, s.AdminToken, nil, &r)
		switch {
		case err == nil && r.Error != "":
			return fmt.Errorf("reconciling product %d: %s", s.ProductID, r.Error)
		case err == nil && r.Pending == 0:
			return nil
		case err != nil && !refused(err, api.CodeBusy):
			return fmt.Errorf("reconciling product %d: %w", s.ProductID, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reconciling product %d: takes still pending (%d) or the lease busy: %w", s.ProductID, r.Pending, ctx.Err())
		case <-t.C:
		}
	}
}

// drainTimeout bounds the wait for the queue to drain after a run.
const drainTimeout = 60 * time.Second

// drain waits until the product's queue is empty and every take is
// settled, then reads how long queued orders took to be written.
func drain(ctx context.Context, c *http.Client, s Spec, row *Row) error {
	ctx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()
	start := time.Now()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		a, err := fetchAudit(ctx, c, s.Targets[0], s.ProductID)
		// Drained once nothing is queued and every take is settled, or
		// every 202 has its row: takes stranded by a purchase that died
		// stay unsettled until the reconciler returns them.
		if err == nil && a.Queued == 0 && (a.Unsettled == 0 || a.Orders >= row.OK) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the queue did not drain within %s (audit: %+v, %v)", drainTimeout, a, err)
		case <-poll.C:
		}
	}
	row.DrainS = time.Since(start).Seconds()
	var d api.Drain
	url := s.Targets[0] + "/api/products/" + strconv.FormatInt(s.ProductID, 10) + "/drain"
	if err := call(ctx, c, http.MethodGet, url, "", nil, &d); err != nil {
		return fmt.Errorf("reading the drain of product %d: %w", s.ProductID, err)
	}
	row.DrainP50MS, row.DrainP99MS = d.P50MS, d.P99MS
	return nil
}

// lookupBatch is the most ids one lookup sends (the service's bound).
const lookupBatch = 1000

// lookup asks the service which of ids reached the table, in batches, and
// returns how many did not, and how many were answered again after the
// first (each buyer answers once, so a repeat is another buyer's).
func lookup(ctx context.Context, c *http.Client, target string, product int64, ids []string) (missing, twice int, err error) {
	// An id answered twice can be one order's row only: the second 202
	// came to nothing, and counts as missing.
	unique := slices.Compact(slices.Sorted(slices.Values(ids)))
	twice = len(ids) - len(unique)
	missing = twice
	for start := 0; start < len(unique); start += lookupBatch {
		var out api.Lookup
		batch := unique[start:min(start+lookupBatch, len(unique))]
		if err := call(ctx, c, http.MethodPost, target+"/api/orders/lookup", "", api.LookupRequest{ProductID: product, IDs: batch}, &out); err != nil {
			return 0, 0, fmt.Errorf("looking up the orders answered 202: %w", err)
		}
		missing += len(out.Missing)
	}
	return missing, twice, nil
}
