package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"seckill/internal/api"
	"seckill/internal/testkit/child"
)

// Overload, measured (issue 21, item 7): the purchase's capacity measured in
// a closed loop, then an open loop at overloadFactor times it, once against
// an instance with the adaptive concurrency limit and once against one
// without, the same buyers, the same shelf of products.
const (
	overloadBuyers  = 1_000
	overloadWorkers = 128
	overloadFactor  = 3
	overloadOpen    = 10 * time.Second
	// overloadLimit is -concurrency-limit's default here: the service's
	// own default is off.
	overloadLimit = 200
	// overloadConns bounds the harness's connections to each instance, as
	// openingConns does.
	overloadConns = 4096
	// The targets of item 7.
	overloadP99      = 200 * time.Millisecond
	overloadGoodput  = 0.80
	overloadSampling = 100 * time.Millisecond
)

// ask is one purchase of the overload run: buyer k mod N buys product
// k div N, so every request could sell (each product has a unit per buyer).
type ask struct {
	due, sent, done time.Duration // from the phase's start
	status          int
	code            string
	err             error
}

func (a ask) latency() time.Duration { return a.done - a.due }
func (a ask) sold() bool             { return a.status == http.StatusCreated || a.status == http.StatusAccepted }
func (a ask) shed() bool {
	return a.status == http.StatusServiceUnavailable && a.code == api.CodeOverloaded
}

// shelf is the products the asks buy, made before the asks that need them:
// each has one unit per buyer.
type shelf struct {
	t      openingTarget
	base   int64
	buyers int
	mode   string
	shards int

	ready atomic.Int64 // products 0..ready-1 exist
	mu    sync.Mutex   // held while making products
	made  int          // as ready, under mu

	toldMu sync.Mutex
	told   map[int64]int // sales answered, by product
}

// id is the product of ask k.
func (s *shelf) id(k int) int64 { return s.base + int64(k/s.buyers) }

// fill makes the products asks 0..k-1 need, and the next one: the ask
// that crosses into a product makes the one after, so that the closed
// loop's other workers need not wait for it.
func (s *shelf) fill(ctx context.Context, k int) error {
	if int(s.ready.Load())*s.buyers >= k {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for ; s.made*s.buyers < k+s.buyers; s.made++ {
		id := s.base + int64(s.made)
		body := map[string]any{"id": id, "name": "overload " + strconv.FormatInt(id, 10), "stock": s.buyers, "mode": s.mode}
		if s.shards > 0 {
			body["shards"] = s.shards
		}
		if st, code, err := s.t.call(ctx, http.MethodPost, "/api/products", s.t.token, body, nil); err != nil || st != http.StatusOK {
			return fmt.Errorf("creating product %d: %d %s %v", id, st, code, err)
		}
		s.ready.Store(int64(s.made + 1))
	}
	return nil
}

// stock is fill before a flood, its progress on bar: the products asks
// up to k need, made one at a time.
func (s *shelf) stock(ctx context.Context, k int, bar *progressBar) error {
	s.mu.Lock()
	from := s.made
	s.mu.Unlock()
	target := (k + 2*s.buyers - 1) / s.buyers // fill's: made × buyers ≥ k + buyers
	if target <= from {
		return nil
	}
	counts := phaseCounts{total: target - from}
	defer bar.watch("making products", counts.progress)()
	for m := from + 1; m <= target; m++ {
		if err := s.fill(ctx, (m-1)*s.buyers); err != nil {
			return err
		}
		counts.done.Add(1)
		counts.ok.Add(1)
	}
	return nil
}

// buy sends ask k to base.
func (s *shelf) buy(ctx context.Context, base string, buyers []openingBuyer, k int, a *ask, start time.Time) {
	t := s.t
	t.base = base
	a.sent = time.Since(start)
	a.status, a.code, a.err = t.call(ctx, http.MethodPost, "/api/orders", buyers[k%len(buyers)].token, map[string]any{"product_id": s.id(k)}, nil)
	a.done = time.Since(start)
	if a.sold() {
		s.toldMu.Lock()
		s.told[s.id(k)]++
		s.toldMu.Unlock()
	}
}

// capacity measures sales per second in a closed loop of overloadWorkers,
// from ask first on, its progress on bar: the sales answered within d,
// after a warm-up of a fifth of d that starts once nine workers in ten
// have had their first answer. Counting from there, not from the start,
// keeps a machine whose cold first answers (new connections, scripts
// loaded) all come late from measuring nothing, and the window from
// counting the wait of those still cold. The loop gives up, with no
// capacity, when they have not answered within capacityPatience.
func (s *shelf) capacity(ctx context.Context, base string, buyers []openingBuyer, first int, d time.Duration, bar *progressBar) (float64, int, error) {
	warm := d / 5
	counts := phaseCounts{total: -1} // a closed loop: the asks are as many as it gets through
	defer bar.watch("capacity", counts.progress)()
	var next, sold atomic.Int64
	next.Store(int64(first))
	var fillErr atomic.Value
	start := time.Now()
	// from is when the window opens, since start: unset (0) until nine
	// workers in ten have answered once.
	var from, warmed atomic.Int64
	over := func() bool {
		f := time.Duration(from.Load())
		if f == 0 {
			return time.Since(start) >= capacityPatience
		}
		return time.Since(start) >= f+d
	}
	var wg sync.WaitGroup
	for range overloadWorkers {
		wg.Go(func() {
			for answered := false; !over() && fillErr.Load() == nil; answered = true {
				k := int(next.Add(1) - 1)
				if err := s.fill(ctx, k+1); err != nil {
					fillErr.Store(err)
					return
				}
				var a ask
				s.buy(ctx, base, buyers, k, &a, start)
				counts.add(a.status, a.code, a.err)
				if !answered && warmed.Add(1) == overloadWorkers*9/10 {
					from.CompareAndSwap(0, int64(a.done+warm))
				}
				if f := time.Duration(from.Load()); f > 0 && a.sold() && a.done >= f && a.done < f+d {
					sold.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := fillErr.Load().(error); err != nil {
		return 0, 0, err
	}
	return float64(sold.Load()) / d.Seconds(), int(next.Load()), nil
}

// capacityPatience is how long the closed loop waits for nine workers in
// ten to answer once.
const capacityPatience = 30 * time.Second

// flood is one open-loop phase: rate asks a second for d, from ask first,
// against base, each sent at its due time whatever the others' answers.
type flood struct {
	name   string
	limit  int // the instance's -concurrency-limit; 0 off
	rate   float64
	d      time.Duration
	first  int
	asks   []ask
	limits []float64 // the limit gauge, sampled every overloadSampling
	span   time.Duration
}

func (s *shelf) flood(ctx context.Context, base string, buyers []openingBuyer, f *flood, bar *progressBar) {
	n := int(f.rate * f.d.Seconds())
	f.asks = make([]ask, n)
	counts := phaseCounts{total: n}
	defer bar.watch("flood "+f.name, counts.progress)()
	gap := time.Duration(float64(time.Second) / f.rate)
	sampled := make(chan []float64, 1)
	sampling, stopSampling := context.WithCancel(ctx)
	go func() { sampled <- sampleLimit(sampling, s.t.client, base) }()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		a := &f.asks[i]
		a.due = time.Duration(i) * gap
		time.Sleep(time.Until(start.Add(a.due)))
		wg.Go(func() {
			s.buy(ctx, base, buyers, f.first+i, a, start)
			counts.add(a.status, a.code, a.err)
		})
	}
	wg.Wait()
	f.span = time.Since(start)
	stopSampling()
	f.limits = <-sampled
}

// sampleLimit reads the instance's seckill_admission_limit gauge until ctx
// ends; nothing when the instance has no limit.
func sampleLimit(ctx context.Context, client *http.Client, base string) []float64 {
	var got []float64
	tick := time.NewTicker(overloadSampling)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return got
		case <-tick.C:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
		if err != nil {
			return got
		}
		resp, err := client.Do(req)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "seckill_admission_limit "); ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					got = append(got, f)
				}
			}
		}
		resp.Body.Close()
	}
}

// overloadBench runs -scenario overload on instances of its own: a hub in
// this process that signs the buyers in and keeps the shelf, and two child
// processes, one with the limit and one without, that the floods strike.
func overloadBench(ctx context.Context, o options, getenv func(string) string, stdout, stderr io.Writer) error {
	if o.targets != "" {
		return fmt.Errorf("-scenario overload starts its own instances (one with the concurrency limit, one without): it takes no -target")
	}
	n, mode, open, limit := overloadBuyers, api.ModeLua, overloadOpen, o.concurrencyLimit
	if o.set["buyers"] {
		n = o.spec.Buyers
	}
	if o.set["mode"] {
		mode = o.modes
	}
	if o.set["duration"] {
		open = time.Duration(o.spec.Duration)
	}
	if n < 1 || open <= 0 || limit < 1 {
		return fmt.Errorf("-scenario overload needs -buyers ≥ 1, -duration > 0 and -concurrency-limit ≥ 1")
	}
	cfg, err := serviceConfig(getenv, o.lockTTL, o.lockWait, o.spec.AdminToken)
	if err != nil {
		return err
	}
	// A Redis and a database of the run's own: the shelf is many products.
	c, err := startCluster(ctx, 1, clusterNeeds{ownRedis: true, spawned: 2}, cfg, stderr)
	if err != nil {
		return err
	}
	defer func() {
		if err := c.stop(); err != nil {
			fmt.Fprintln(stderr, "loadtest: stopping the service:", err)
		}
	}()
	limited, err := c.spawn(ctx, "127.0.0.1:0", "-concurrency-limit", strconv.Itoa(limit))
	if err != nil {
		return fmt.Errorf("starting the instance with the limit: %w", err)
	}
	c.children = append(c.children, limited)
	unlimited, err := c.spawn(ctx, "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("starting the instance without the limit: %w", err)
	}
	c.children = append(c.children, unlimited)

	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost, tr.DisableCompression = overloadConns, overloadConns, true
	defer tr.CloseIdleConnections()
	t := openingTarget{client: &http.Client{Transport: tr, Timeout: time.Minute}, base: c.URLs[0], token: o.spec.AdminToken}
	run := "overload-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	fmt.Fprintf(stderr, "signing %d buyers in\n", n)
	bar := newProgressBar(stderr)
	buyers, err := t.signIn(ctx, run, n, bar)
	if err != nil {
		return err
	}
	o.pickProducts(stderr)
	s := &shelf{t: t, base: o.spec.ProductID, buyers: n, mode: mode, shards: o.spec.Shards, told: make(map[int64]int)}
	return s.measure(ctx, open, limit, []*child.Instance{limited, unlimited}, buyers, stdout, stderr, bar)
}

// measure runs the closed loop against the instance without the limit,
// then the floods, and judges them.
func (s *shelf) measure(ctx context.Context, open time.Duration, limit int, ins []*child.Instance, buyers []openingBuyer, stdout, stderr io.Writer, bar *progressBar) error {
	fmt.Fprintf(stderr, "capacity: %d workers, closed loop, %s after a %s warm-up from the workers' first answers\n", overloadWorkers, open/2, open/10)
	capacity, next, err := s.capacity(ctx, ins[1].URL, buyers, 0, open/2, bar)
	if err != nil {
		return err
	}
	if capacity <= 0 {
		return fmt.Errorf("the closed loop sold nothing: no capacity to overload")
	}
	fmt.Fprintf(stdout, "\noverload: capacity %.0f sales/s (closed loop, %d workers, %s, mode %s); open loop at %d× = %.0f req/s for %s\n",
		capacity, overloadWorkers, open/2, s.mode, overloadFactor, capacity*overloadFactor, open)
	floods := []*flood{{name: "limit " + strconv.Itoa(limit), limit: limit}, {name: "no limit"}}
	for i, f := range floods {
		f.rate, f.d, f.first = capacity*overloadFactor, open, next
		if err := s.stock(ctx, next+int(f.rate*f.d.Seconds()), bar); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "flood %s: %.0f req/s for %s\n", f.name, f.rate, f.d)
		s.flood(ctx, ins[i].URL, buyers, f, bar)
		next += len(f.asks)
	}
	audits, err := s.audit(ctx, bar)
	if err != nil {
		return err
	}
	return judgeOverload(stdout, capacity, floods, audits, s)
}

// audit settles every product of the shelf and returns their audits.
func (s *shelf) audit(ctx context.Context, bar *progressBar) ([]api.Audit, error) {
	var out []api.Audit
	counts := phaseCounts{total: s.made}
	defer bar.watch("auditing products", counts.progress)()
	for i := range s.made {
		a, err := s.t.settle(ctx, s.base+int64(i))
		if err != nil {
			return nil, err
		}
		out = append(out, a)
		counts.done.Add(1)
		counts.ok.Add(1)
	}
	return out, nil
}
