package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
)

// The opening second: a product that opens at a second, and its buyers, each
// signed in, arriving open-loop within the first second after it (issue 21).
const (
	openingBuyers = 20_000
	openingStock  = 1_000
	// openingLead is how far ahead of the opening the product is created:
	// the warm-up has this long.
	openingLead = 2 * time.Second
	// openingSpread is the window the buyers arrive in after the opening.
	openingSpread = time.Second
	// openingEarly is the share of buyers who click once before the
	// opening too (within openingEarlyBy of it): they are told not_started
	// and click again with the others.
	openingEarly   = 0.05
	openingEarlyBy = 200 * time.Millisecond
	// openingFirst is the opening's first moments, reported apart, warm
	// against cold.
	openingFirst = 100 * time.Millisecond
	// openingConns bounds the harness's connections: beyond them a request
	// waits in the client, and its latency, counted from its due time, says so.
	openingConns = 4096
)

// openingBuyer is a signed-in buyer.
type openingBuyer struct {
	id    int64
	token string
}

// click is one request of the opening and its answer.
type click struct {
	buyer  int
	due    time.Duration // after the opening (negative: an early click)
	sent   time.Duration // when its first request left (its path, or its purchase)
	done   time.Duration
	status int
	code   string
	err    error
	// at is when the service made the order, on its clock: a sale's
	// order made before the opening is one the window let through.
	at time.Time
}

// latency is a click's, counted from its due time (open loop).
func (c click) latency() time.Duration { return c.done - c.due }

// won reports a click that bought a unit.
func (c click) won() bool { return c.status == http.StatusCreated || c.status == http.StatusAccepted }

// opening is one run: a product, its clicks, and what the store says after.
type opening struct {
	name   string
	clicks []click
	audit  api.Audit
	stock  int
	// chilled says how the cold opening was made cold; "" when warm.
	chilled string
	opens   time.Time // on the service's clock
}

// openingTarget is the service the opening runs against.
type openingTarget struct {
	client *http.Client
	base   string
	token  string // the operator's
	redis  string // the service's Redis, for the cold run; "" when unknown
}

// call sends a JSON request and decodes a JSON answer into out.
func (t openingTarget) call(ctx context.Context, method, path, bearer string, body, out any) (int, string, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, "", err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, t.base+path, r)
	if err != nil {
		return 0, "", err
	}
	if body != nil {
		req.Header.Set("Content-Type", api.MediaType)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, "", err
	}
	if resp.StatusCode/100 != 2 {
		var ae api.Error
		_ = json.Unmarshal(data, &ae)
		return resp.StatusCode, ae.Code, nil
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, "", fmt.Errorf("%s %s: decoding %q: %w", method, path, data, err)
		}
	}
	return resp.StatusCode, "", nil
}

// bulkNames is how many buyers one operator's bulk creation makes.
const bulkNames = 1000

// signIn makes n buyers, named after run, and signs each in: the
// operator's bulk creation (POST /api/accounts/bulk), bulkNames at a time,
// four requests at once, so that no default limit on accounts is lifted
// for the harness. Its progress is on bar.
func (t openingTarget) signIn(ctx context.Context, run string, n int, bar *progressBar) ([]openingBuyer, error) {
	buyers := make([]openingBuyer, n)
	var next atomic.Int64
	made := phaseCounts{total: n}
	defer bar.watch("signing in", made.progress)()
	var failed atomic.Bool
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for from := int(next.Add(bulkNames) - bulkNames); from < n && !failed.Load(); from = int(next.Add(bulkNames) - bulkNames) {
				req := api.BulkAccounts{Names: make([]string, min(bulkNames, n-from))}
				for i := range req.Names {
					req.Names[i] = run + "-" + strconv.Itoa(from+i)
				}
				var out api.BulkSessions
				st, code, err := t.call(ctx, http.MethodPost, "/api/accounts/bulk", t.token, req, &out)
				if err == nil && (st != http.StatusCreated || len(out.Sessions) != len(req.Names)) {
					err = fmt.Errorf("making buyers %d to %d: %d %s", from, from+len(req.Names)-1, st, code)
				}
				if err != nil {
					failed.Store(true)
					once.Do(func() { firstErr = err })
					return
				}
				for i, s := range out.Sessions {
					buyers[from+i] = openingBuyer{id: s.BuyerID, token: s.Token}
				}
				made.done.Add(int64(len(out.Sessions)))
				made.ok.Add(int64(len(out.Sessions)))
			}
		})
	}
	wg.Wait()
	return buyers, firstErr
}

// openingProduct is how the product of one run is sold.
type openingProduct struct {
	id       int64
	stock    int
	mode     string
	shards   int
	fallback bool
	path     bool
}

// create creates the product, opening lead from now on the server's clock,
// and returns the opening on the server's clock and on this machine's
// (see offset).
func (t openingTarget) create(ctx context.Context, p openingProduct, lead time.Duration) (server, local time.Time, err error) {
	body := map[string]any{"id": p.id, "name": "opening " + strconv.FormatInt(p.id, 10), "stock": p.stock,
		"mode": p.mode, "fallback": p.fallback, "path": p.path, "starts_at": time.Now().Add(lead).UTC().Format(time.RFC3339Nano)}
	if p.shards > 0 {
		body["shards"] = p.shards
	}
	var view openingView
	st, code, err := t.call(ctx, http.MethodPost, "/api/products", t.token, body, &view)
	if err != nil || st != http.StatusOK {
		return server, local, fmt.Errorf("creating product %d: %d %s %v", p.id, st, code, err)
	}
	if view.StartsAt == nil || view.Now.IsZero() {
		return server, local, fmt.Errorf("product %d: the service shows no starts_at or now: does it know sale windows?", p.id)
	}
	offset, err := t.offset(ctx, p.id)
	if err != nil {
		return server, local, err
	}
	return *view.StartsAt, view.StartsAt.Add(-offset), nil
}

// openingView is what the opening reads of a product view.
type openingView struct {
	StartsAt *time.Time `json:"starts_at"`
	Now      time.Time  `json:"now"`
}

// offset is the server's clock less this machine's, as the page measures
// it: from the product view's now, taken at half the round trip, of the
// quickest of a few reads (the reset's own answer is slow: its warm-up
// would put half of it into the estimate).
func (t openingTarget) offset(ctx context.Context, id int64) (time.Duration, error) {
	best, rtt := time.Duration(0), time.Duration(-1)
	for range 5 {
		var view openingView
		sent := time.Now()
		st, code, err := t.call(ctx, http.MethodGet, "/api/products/"+strconv.FormatInt(id, 10), "", nil, &view)
		recv := time.Now()
		if err != nil || st != http.StatusOK {
			return 0, fmt.Errorf("reading product %d: %d %s %v", id, st, code, err)
		}
		if d := recv.Sub(sent); rtt < 0 || d < rtt {
			best, rtt = view.Now.Sub(sent.Add(d/2)), d
		}
	}
	return best, nil
}

// chill makes the opening cold: the scripts are flushed from Redis and
// every client connection to it is closed, the service's pools with them
// (go-redis drops a dead idle connection when it next takes it), and the
// harness's idle connections are closed. It says what it could not do:
// miniredis has no CLIENT KILL. Never on a shared Redis: the run starts a
// Redis of its own, and with -target the operator names theirs.
func (t openingTarget) chill(ctx context.Context) (string, error) {
	t.client.CloseIdleConnections()
	if t.redis == "" {
		return "", fmt.Errorf("the cold opening needs the service's Redis: run without -target, or set REDIS_ADDR to the target's")
	}
	rdb := redis.NewClient(&redis.Options{Addr: t.redis})
	defer rdb.Close()
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		return "", fmt.Errorf("flushing the scripts: %w", err)
	}
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		return "scripts flushed; the service's Redis connections kept (" + err.Error() + ")", nil
	}
	return "scripts flushed, every Redis connection closed", nil
}

// schedule draws each buyer's clicks: one in the spread after the opening,
// and, for the early share, one before it too.
func schedule(buyers int, rng *rand.Rand) []click {
	clicks := make([]click, 0, buyers+int(float64(buyers)*openingEarly)+1)
	for b := range buyers {
		clicks = append(clicks, click{buyer: b, due: time.Duration(rng.Int64N(int64(openingSpread)))})
		if rng.Float64() < openingEarly {
			clicks = append(clicks, click{buyer: b, due: -time.Duration(1 + rng.Int64N(int64(openingEarlyBy)))})
		}
	}
	slices.SortFunc(clicks, func(a, b click) int { return int(a.due - b.due) })
	return clicks
}

// fire sends every click at its due time, open loop: a click does not wait
// for another's answer.
// The answers are counted as they come, for the progress bar.
func (t openingTarget) fire(ctx context.Context, p openingProduct, open time.Time, buyers []openingBuyer, clicks []click, counts *phaseCounts) {
	var wg sync.WaitGroup
	for i := range clicks {
		c := &clicks[i]
		wg.Go(func() {
			time.Sleep(time.Until(open.Add(c.due)))
			t.click(ctx, p, open, buyers[c.buyer], c)
			counts.add(c.status, c.code, c.err)
		})
	}
	wg.Wait()
}

// click is one buyer's click: its path token first when the product asks
// for one, then the purchase.
func (t openingTarget) click(ctx context.Context, p openingProduct, open time.Time, b openingBuyer, c *click) {
	body := map[string]any{"product_id": p.id}
	c.sent = time.Since(open)
	if p.path {
		var path struct {
			Token string `json:"path_token"`
		}
		st, code, err := t.call(ctx, http.MethodPost, "/api/products/"+strconv.FormatInt(p.id, 10)+"/path", b.token, map[string]any{}, &path)
		if err != nil || st != http.StatusCreated && st != http.StatusOK {
			c.status, c.code, c.err, c.done = st, code, err, time.Since(open)
			return
		}
		body["path_token"] = path.Token
	}
	var o struct {
		CreatedAt time.Time `json:"created_at"`
	}
	c.status, c.code, c.err = t.call(ctx, http.MethodPost, "/api/orders", b.token, body, &o)
	c.at = o.CreatedAt
	c.done = time.Since(open)
}

// settle waits for the product's queue to drain (the async mode) and
// returns its audit.
func (t openingTarget) settle(ctx context.Context, id int64) (api.Audit, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		var a api.Audit
		st, code, err := t.call(ctx, http.MethodGet, "/api/products/"+strconv.FormatInt(id, 10)+"/audit", "", nil, &a)
		if err != nil || st != http.StatusOK {
			return a, fmt.Errorf("auditing product %d: %d %s %v", id, st, code, err)
		}
		if a.Queued == 0 && a.Unsettled == 0 || time.Now().After(deadline) {
			return a, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openingBench runs -scenario opening: warm, cold, and warm without
// fallback, each on a product of its own, the same signed-in buyers.
func openingBench(ctx context.Context, o options, getenv func(string) string, stdout, stderr io.Writer) error {
	t, stop, err := o.openingTarget(ctx, getenv, stderr)
	if err != nil {
		return err
	}
	defer stop()
	n, units, mode := openingBuyers, openingStock, api.ModeLua
	if o.set["buyers"] {
		n = o.spec.Buyers
	}
	if o.set["stock"] {
		units = o.spec.Stock
	}
	if o.set["mode"] {
		mode = o.modes
	}
	run := "opening-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	fmt.Fprintf(stderr, "signing %d buyers in at %s\n", n, t.base)
	bar := newProgressBar(stderr)
	buyers, err := t.signIn(ctx, run, n, bar)
	if err != nil {
		return err
	}
	base := o.spec.ProductID
	if base == 0 {
		base = 1_000_000 + rand.Int64N(1_000_000_000)
	}
	rng := rand.New(rand.NewPCG(uint64(base), 21))
	var runs []opening
	for k, v := range []struct {
		name           string
		cold, fallback bool
	}{{"warm", false, true}, {"cold", true, true}, {"warm, no fallback", false, false}} {
		p := openingProduct{id: base + int64(k), stock: units, mode: mode, shards: o.spec.Shards, fallback: v.fallback, path: o.path}
		r, err := t.open(ctx, p, v.name, v.cold, buyers, schedule(n, rng), bar)
		if err != nil {
			return fmt.Errorf("opening %s: %w", v.name, err)
		}
		runs = append(runs, r)
	}
	printOpenings(stdout, runs)
	for _, r := range runs {
		if r.verdict() != api.VerdictOK {
			return fmt.Errorf("opening %s: verdict %s, %d buyers told something the store does not hold, %d orders made before the opening: %w",
				r.name, r.audit.Verdict, r.misled(), r.openedEarly(), errExpectation)
		}
	}
	return nil
}

// open runs one opening of product p, its progress on bar from the
// product's creation (the clicks wait openingLead for the opening) to its
// audit.
func (t openingTarget) open(ctx context.Context, p openingProduct, name string, cold bool, buyers []openingBuyer, clicks []click, bar *progressBar) (opening, error) {
	counts := phaseCounts{total: len(clicks)}
	defer bar.watch("opening "+name, counts.progress)()
	opens, open, err := t.create(ctx, p, openingLead)
	if err != nil {
		return opening{}, err
	}
	var chilled string
	if cold {
		time.Sleep(time.Until(open.Add(-openingEarlyBy - 100*time.Millisecond)))
		if chilled, err = t.chill(ctx); err != nil {
			return opening{}, err
		}
	}
	t.fire(ctx, p, open, buyers, clicks, &counts)
	a, err := t.settle(ctx, p.id)
	return opening{name: name, clicks: clicks, audit: a, stock: p.stock, chilled: chilled, opens: opens}, err
}

// openingTarget is the -target service, or one started for the run (with
// no per-address limit, see serviceConfig: every buyer signs in from here).
func (o options) openingTarget(ctx context.Context, getenv func(string) string, stderr io.Writer) (openingTarget, func(), error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost, tr.DisableCompression = openingConns, openingConns, true
	t := openingTarget{client: &http.Client{Transport: tr, Timeout: time.Minute}, token: o.spec.AdminToken}
	if o.targets != "" {
		t.base, t.redis = splitList(o.targets)[0], getenv("REDIS_ADDR")
		return t, tr.CloseIdleConnections, nil
	}
	cfg, err := serviceConfig(getenv, o.lockTTL, o.lockWait, o.spec.AdminToken)
	if err != nil {
		return t, nil, err
	}
	// A Redis of the run's own: the cold opening flushes its scripts and
	// closes its connections, which must not touch a shared one.
	c, err := startCluster(ctx, 1, clusterNeeds{ownRedis: true}, cfg, stderr)
	if err != nil {
		return t, nil, err
	}
	t.base, t.redis = c.URLs[0], c.first.RedisAddr()
	return t, func() {
		tr.CloseIdleConnections()
		if err := c.stop(); err != nil {
			fmt.Fprintln(stderr, "loadtest: stopping the service:", err)
		}
	}, nil
}
