package main

// The lock drills (lockdrill_*.go) run the lock failures whose fault lies
// below what the service's HTTP API reaches (a node's clock, a replica's
// link) on the same locks and stock code the service runs, and judge each
// from the data: the units the holders were told they sold, against the
// stock.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/stock"
)

// Outcome is what one variant of a drill did.
type Outcome struct {
	Variant string
	// Verdict is api.VerdictOversold when the holders were told they sold
	// more units than the stock held, else api.VerdictOK.
	Verdict string
	Initial int
	// Sold counts the takes that reported success to their holder.
	Sold   int
	Detail string
}

func (o Outcome) String() string {
	return fmt.Sprintf("%-32s %-9s sold %d of %d  %s", o.Variant, o.Verdict, o.Sold, o.Initial, o.Detail)
}

// ClockJump sets up Kleppmann's Redlock counter-example ("How to do
// distributed locking", 2016) on len(Nodes) independent Redis nodes.
type ClockJump struct {
	// StoreAddr is the Redis that holds the product's stock; both holders
	// read and write it, through a client of the drill's own.
	StoreAddr string
	// Nodes are the Redlock nodes, all reachable by the second holder.
	// The first holder reaches only Nodes[:quorum] (a network fault), so
	// Nodes[0] is the one node both majorities share.
	Nodes []*redis.Client
	// Jump moves Nodes[0]'s clock forward by d; nil leaves it alone.
	Jump func(d time.Duration)
	// Fence gives each grant a token drawn from a counter on Store, which
	// the store checks on every read and write of the shard. Redlock has no
	// counter of its own: fencing needs the store's cooperation.
	Fence bool
}

// The drill's timing: A holds its read for clockJumpHold of a clockJumpTTL
// lease, so it writes while its lease is, by its own clock, far from over;
// node 0's clock jumps past the whole lease.
const (
	clockJumpTTL  = 2 * time.Second
	clockJumpHold = 500 * time.Millisecond
	clockJumpBy   = clockJumpTTL + time.Second
)

// Run sells one unit twice over, or tries to: A takes the shard's Redlock on
// a bare majority and reads the stock; node 0's clock jumps, so A's key
// there expires; B takes the lock on node 0 and the nodes A cannot reach,
// another majority, reads and writes; A, its lease valid by its own clock,
// writes its stale read.
func (c ClockJump) Run(ctx context.Context, variant string) (Outcome, error) {
	out := Outcome{Variant: variant, Initial: 1}
	n := len(c.Nodes)
	quorum := n/2 + 1
	if n < 3 {
		return out, fmt.Errorf("the clock-jump drill needs at least 3 nodes, got %d", n)
	}
	cut, err := blackHole()
	if err != nil {
		return out, err
	}
	defer cut.Close()
	store := redis.NewClient(&redis.Options{Addr: c.StoreAddr, DialerRetries: 1})
	defer store.Close()
	aRead := &readHook{read: make(chan struct{})}
	store.AddHook(aRead)
	lockerA, lockerB, err := c.lockers(store, cut.Client, quorum)
	if err != nil {
		return out, err
	}

	s := stock.NewStore(store, nil)
	p := stock.Product{Layout: stock.Layout{ID: time.Now().UnixNano(), Shards: 1, Epoch: 1}, Where: stock.InRedis}
	if err := s.LayOut(ctx, p, []int{out.Initial}, out.Initial); err != nil {
		return out, err
	}
	defer purge(store, p)
	take := func(ctx context.Context, locker lock.Locker, user int64, hold time.Duration) (stock.Taken, error) {
		return s.Take(ctx, stock.Request{Product: p, Hooks: order.Faults{Hold: hold}.Hooks(),
			Taker:  stock.RMW{Locked: stock.Locked{Locker: locker, Lock: lock.Options{TTL: clockJumpTTL}}},
			Ticket: stock.Ticket{User: user, Order: idgen.ID(1000 + user), Key: fmt.Sprint("drill-", user)}})
	}

	type result struct {
		t   stock.Taken
		err error
	}
	aDone := make(chan result, 1)
	go func() {
		t, err := take(context.WithValue(ctx, holderA{}, true), lockerA, 1, clockJumpHold)
		aDone <- result{t, err}
	}()
	var a result
	select {
	case <-aRead.read: // A holds the lock and has read the stock
	case a = <-aDone:
		return out, fmt.Errorf("A's take ended before it read the stock: %v", a.err)
	case <-time.After(5 * time.Second):
		return out, errors.New("A did not read the stock within 5s")
	}
	if c.Jump != nil {
		c.Jump(clockJumpBy)
	}
	_, errB := take(ctx, lockerB, 2, 0)
	a = <-aDone
	return c.verdict(out, quorum, a.t, a.err, errB)
}

// lockers are A's, which reaches the first quorum nodes and sees the others
// through cut (a black hole), and B's, which reaches every node.
func (c ClockJump) lockers(store, cut *redis.Client, quorum int) (lockerA, lockerB lock.Locker, err error) {
	aView := make([]*redis.Client, len(c.Nodes))
	for i := range aView {
		aView[i] = c.Nodes[i]
		if i >= quorum {
			aView[i] = cut
		}
	}
	if lockerA, err = c.locker(aView, store); err != nil {
		return nil, nil, err
	}
	if lockerB, err = c.locker(c.Nodes, store); err != nil {
		return nil, nil, err
	}
	return lockerA, lockerB, nil
}

// verdict counts the units A and B were told they sold against the one in
// stock; an error other than a lock's refusal fails the drill.
func (c ClockJump) verdict(out Outcome, quorum int, aTaken stock.Taken, errA, errB error) (Outcome, error) {
	if errA == nil {
		out.Sold++
	}
	if errB == nil {
		out.Sold++
	}
	for _, err := range []error{errA, errB} {
		if err != nil && !errors.Is(err, stock.ErrLockTimeout) && !errors.Is(err, stock.ErrLeaseLost) {
			return out, err
		}
	}
	out.Verdict = api.VerdictOK
	if out.Sold > out.Initial {
		out.Verdict = api.VerdictOversold
	}
	out.Detail = fmt.Sprintf("A on nodes 0–%d; %s; B %s; A %s", quorum-1, c.jumpNote(), outcome(errB, stock.Taken{}), outcome(errA, aTaken))
	return out, nil
}

func (c ClockJump) jumpNote() string {
	if c.Jump == nil {
		return "no clock jumps"
	}
	return fmt.Sprintf("node 0's clock jumps %s", clockJumpBy)
}

func outcome(err error, t stock.Taken) string {
	switch {
	case errors.Is(err, stock.ErrLockTimeout):
		return "refused the lock"
	case errors.Is(err, stock.ErrLeaseLost):
		return "refused by the fence"
	case err != nil:
		return err.Error()
	case t.LeaseLost:
		return "sold, and learned at release that the lock was gone"
	case t.ReleaseErr != nil:
		return "sold, and its release could not tell (nodes it cannot reach)"
	}
	return "sold"
}

// locker is a Redlock over nodes, behind a fence drawn from store when
// c.Fence.
func (c ClockJump) locker(nodes []*redis.Client, store redis.Cmdable) (lock.Locker, error) {
	clients := make([]lock.RedisClient, len(nodes))
	for i, n := range nodes {
		clients[i] = n
	}
	r, err := lock.NewRedlock(clients...)
	if err != nil {
		return nil, err
	}
	r.NodeTimeout = 200 * time.Millisecond // loopback; a refused node answers at once
	if !c.Fence {
		return r, nil
	}
	return storeFence{Locker: r, store: store}, nil
}

// storeFence numbers each grant of the inner lock with an INCR on the store
// that stock's fence checks, the one place that sees both holders' writes.
type storeFence struct {
	lock.Locker
	store redis.Cmdable
}

type fencedLease struct {
	lock.Lease
	token uint64
}

func (l fencedLease) Token() uint64 { return l.token }

func (f storeFence) Acquire(ctx context.Context, key string, opt lock.Options) (lock.Lease, error) {
	l, err := f.Locker.Acquire(ctx, key, opt)
	if err != nil {
		return nil, err
	}
	token, err := f.store.Incr(ctx, key+":drill-token").Uint64()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("drawing a fencing token: %w", err), l.Release(ctx))
	}
	return fencedLease{Lease: l, token: token}, nil
}

func purge(store *redis.Client, p stock.Product) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	stock.Purge(ctx, store, []int64{p.ID}, p.LockKey(0)+":drill-token")
}

// holderA marks the context of A's take, for readHook.
type holderA struct{}

// readHook closes read once A's first read of the store has been answered:
// a GET, or the fenced read's script (a NOSCRIPT reply is not an answer).
// The commands before it on the store are the fence's INCR, if any.
type readHook struct {
	read chan struct{}
	once sync.Once
}

func (h *readHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *readHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *readHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if ctx.Value(holderA{}) == nil {
			return err
		}
		switch cmd.Name() {
		case "get", "evalsha", "eval":
			if err == nil || errors.Is(err, redis.Nil) {
				h.once.Do(func() { close(h.read) })
			}
		}
		return err
	}
}

// blackHole is a node the first holder cannot reach: a client of a
// listener that accepts connections and never answers, as a partition
// drops packets. Its commands end at the Redlock's node timeout.
type blackHoleNode struct {
	*redis.Client
	l     net.Listener
	conns chan net.Conn
}

const blackHoleTimeout = 100 * time.Millisecond

func blackHole() (*blackHoleNode, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the unreachable nodes: %w", err)
	}
	b := &blackHoleNode{l: l, conns: make(chan net.Conn, 64)}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			select {
			case b.conns <- conn:
			default:
				conn.Close()
			}
		}
	}()
	// Its own timeouts end the connection's handshake, which the
	// Redlock's per-round deadline does not reach.
	b.Client = redis.NewClient(&redis.Options{Addr: l.Addr().String(), DialerRetries: 1, MaxRetries: -1,
		DialTimeout: blackHoleTimeout, ReadTimeout: blackHoleTimeout, WriteTimeout: blackHoleTimeout, ContextTimeoutEnabled: true})
	return b, nil
}

// Close closes the client, the listener and what it accepted.
func (b *blackHoleNode) Close() error {
	err := b.Client.Close()
	b.l.Close()
	for {
		select {
		case conn := <-b.conns:
			conn.Close()
		default:
			return err
		}
	}
}
