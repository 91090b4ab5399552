// Package gate is the service's side of the sold-out gate at the edge
// (deploy/gate: nginx with Lua in front of the replicas). The gate learns
// "sold out" from the service's own refusals (api.HeaderSoldOut) and then
// answers the product's purchases itself; this package tells every gate
// when a product this process refused has stock again, so that no gate keeps
// a stale flag. docs/GATE.md tells why the notices flow this way.
package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"seckill/internal/api"
)

// Options configure a Notifier.
type Options struct {
	// URLs are the control endpoints' base URLs of every gate, e.g.
	// "http://nginx:8082". Required.
	URLs []string
	// Secret is sent in api.HeaderGateSecret. Default: none (a gate without
	// a secret accepts notices from loopback only).
	Secret string
	// Timeout bounds one notice to one gate. Default: 1s.
	Timeout time.Duration
	// Tries is how many times a notice is sent to a gate that fails it.
	// Default: 3. Past that the gate's own expiry of its sold-out entries
	// (seconds) is what un-gates the product.
	Tries int
	// Backoff is the pause between tries, doubled each time. Default: 100ms.
	Backoff time.Duration
	// Client sends the notices. Default: a client of its own.
	Client *http.Client
	// Log receives the notices that failed. Default: slog.Default().
	Log *slog.Logger
}

// Defaults of Options.
const (
	DefaultTimeout = time.Second
	DefaultTries   = 3
	DefaultBackoff = 100 * time.Millisecond
	// MaxBatch bounds the products of one notice (the URL's length).
	MaxBatch = 200
)

// Notifier sends "has stock again" notices to every gate, off the purchase
// path: StockBack only records the product, and one goroutine sends what
// was recorded, coalesced.
type Notifier struct {
	opt Options

	mu      sync.Mutex
	pending map[int64]struct{}
	wake    chan struct{} // capacity 1: a send is due
	stop    chan struct{}
	done    chan struct{}
	closing sync.Once

	sent, failed atomic.Int64
}

// New returns a Notifier and starts its sender; Close stops it.
func New(opt Options) (*Notifier, error) {
	if len(opt.URLs) == 0 {
		return nil, errors.New("gate: no gate URL")
	}
	for i, u := range opt.URLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, fmt.Errorf("gate: URL %q is not http(s)://host[:port]", u)
		}
		opt.URLs[i] = strings.TrimSuffix(u, "/")
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.Tries <= 0 {
		opt.Tries = DefaultTries
	}
	if opt.Backoff <= 0 {
		opt.Backoff = DefaultBackoff
	}
	if opt.Client == nil {
		opt.Client = &http.Client{}
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	n := &Notifier{opt: opt, pending: make(map[int64]struct{}),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go n.run()
	return n, nil
}

// StockBack records that product id has stock again; the gates are told
// shortly. It never blocks, and repeated calls before the send are one.
func (n *Notifier) StockBack(id int64) {
	n.mu.Lock()
	n.pending[id] = struct{}{}
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default: // a send is already due; it will take this product too
	}
}

// Sent and Failed count the notices (one product batch to one gate) that
// were accepted, and those given up after every try.
func (n *Notifier) Sent() int64   { return n.sent.Load() }
func (n *Notifier) Failed() int64 { return n.failed.Load() }

// Close sends what is recorded, within the notices' own bounds, and stops.
func (n *Notifier) Close() error {
	n.closing.Do(func() { close(n.stop) })
	<-n.done
	return nil
}

func (n *Notifier) run() {
	defer close(n.done)
	for {
		select {
		case <-n.wake:
			n.flush()
		case <-n.stop:
			n.flush()
			return
		}
	}
}

// flush sends the recorded products to every gate at once.
func (n *Notifier) flush() {
	n.mu.Lock()
	ids := make([]int64, 0, len(n.pending))
	for id := range n.pending {
		ids = append(ids, id)
	}
	clear(n.pending)
	n.mu.Unlock()
	slices.Sort(ids)
	for batch := range slices.Chunk(ids, MaxBatch) {
		var wg sync.WaitGroup
		for _, u := range n.opt.URLs {
			wg.Go(func() { n.tell(u, batch) })
		}
		wg.Wait()
	}
}

// tell sends one batch to one gate, trying again a bounded number of times.
func (n *Notifier) tell(base string, ids []int64) {
	list := make([]string, len(ids))
	for i, id := range ids {
		list[i] = strconv.FormatInt(id, 10)
	}
	target := base + api.GateStockBackPath + "?products=" + strings.Join(list, ",")
	var err error
	pause := n.opt.Backoff
	for try := range n.opt.Tries {
		if try > 0 {
			time.Sleep(pause) // a bounded pause between tries of a background send
			pause *= 2
		}
		if err = n.post(target); err == nil {
			n.sent.Add(1)
			return
		}
	}
	n.failed.Add(1)
	n.opt.Log.Warn("a gate was not told that products have stock again; it forgets them when their sold-out entries expire",
		"gate", base, "products", list, "error", err)
}

func (n *Notifier) post(target string) error {
	ctx, cancel := context.WithTimeout(context.Background(), n.opt.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, nil)
	if err != nil {
		return fmt.Errorf("building a notice to %s: %w", target, err)
	}
	if n.opt.Secret != "" {
		req.Header.Set(api.HeaderGateSecret, n.opt.Secret)
	}
	resp, err := n.opt.Client.Do(req)
	if err != nil {
		return fmt.Errorf("notifying %s: %w", target, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("notifying %s: status %s", target, resp.Status)
	}
	return nil
}
