// Package connlimit caps the TCP connections a server holds open, per peer
// address and in all, so that one client's idle keep-alive connections
// cannot use up the process's file descriptors and starve everyone else.
//
// The address is the TCP peer's. Behind a proxy every client arrives from
// the proxy's address: list the proxy in Options.Exempt, or the proxy's
// connections are capped as one client's (and the proxy must cap its own
// clients).
package connlimit

import (
	"container/list"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Options are the caps. A cap of 0 is no cap.
type Options struct {
	// PerAddress is the most connections one peer address may hold open;
	// one more is closed as soon as it is accepted.
	PerAddress int
	// Total is the most connections open in all. One more closes the
	// connection that has waited longest for a request (a keep-alive
	// connection between requests, or a new one that sent nothing yet) to
	// make room; when every open connection is serving a request, the new
	// one is closed instead.
	Total int
	// Exempt reports the peers PerAddress leaves alone: the trusted proxies,
	// which carry many clients each. Nil exempts none.
	Exempt func(netip.Addr) bool
}

// Listener is a net.Listener that holds its connections within Options.
// The http.Server serving it must report its connections' states through
// ConnState, which is how Listener knows which ones wait for a request.
type Listener struct {
	net.Listener
	opts Options

	mu      sync.Mutex
	open    int
	perAddr map[netip.Addr]int
	waiting list.List // of *conn waiting for a request, the longest waiting first

	refused, evicted atomic.Int64
}

// NewListener caps the connections ln accepts.
func NewListener(ln net.Listener, o Options) *Listener {
	if o.Exempt == nil {
		o.Exempt = func(netip.Addr) bool { return false }
	}
	return &Listener{Listener: ln, opts: o, perAddr: map[netip.Addr]int{}}
}

// conn is an accepted connection, counted until it is closed.
type conn struct {
	net.Conn
	l      *Listener
	addr   netip.Addr
	closed bool          // released; guarded by l.mu
	wait   *list.Element // its place in l.waiting, nil while it serves a request; guarded by l.mu
}

// Accept returns the next connection within the caps, closing those over
// them: a refusal is a closed connection to its client, never an error to
// the server, whose accept loop would back off.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		admitted, victim := l.admit(c)
		if victim != nil {
			// Outside the lock: its Close comes back to release, a no-op
			// for a connection admit has released already.
			_ = victim.Conn.Close()
		}
		if admitted != nil {
			return admitted, nil
		}
		_ = c.Close()
	}
}

// admit counts c in, or refuses it (nil); victim, when not nil, is an
// idle connection released to make room, for the caller to close.
func (l *Listener) admit(c net.Conn) (admitted, victim *conn) {
	addr := peer(c)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.opts.PerAddress > 0 && l.perAddr[addr] >= l.opts.PerAddress && !l.opts.Exempt(addr) {
		l.refused.Add(1)
		return nil, nil
	}
	if l.opts.Total > 0 && l.open >= l.opts.Total {
		front := l.waiting.Front()
		if front == nil {
			l.refused.Add(1)
			return nil, nil
		}
		victim = front.Value.(*conn)
		l.releaseLocked(victim)
		l.evicted.Add(1)
	}
	admitted = &conn{Conn: c, l: l, addr: addr}
	l.open++
	l.perAddr[addr]++
	// A new connection waits for its first request as an idle one waits for
	// its next: both hold a descriptor and do nothing.
	admitted.wait = l.waiting.PushBack(admitted)
	return admitted, victim
}

// ConnState is the http.Server's ConnState hook: it tells Listener which
// connections serve a request and which wait for one.
//
// A connection closed while it waits may have had a request on the wire;
// its client sees the connection closed, as when http.Server.Shutdown
// closes idle connections, and an HTTP client retries an idempotent
// request on a fresh one.
func (l *Listener) ConnState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*conn)
	if !ok || c.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.closed {
		return
	}
	switch s {
	case http.StateActive, http.StateHijacked:
		if c.wait != nil {
			l.waiting.Remove(c.wait)
			c.wait = nil
		}
	case http.StateIdle:
		if c.wait == nil {
			c.wait = l.waiting.PushBack(c)
		}
	case http.StateClosed:
		l.releaseLocked(c)
	}
}

func (c *conn) Close() error {
	c.l.mu.Lock()
	c.l.releaseLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// releaseLocked stops counting c; l.mu is held.
func (l *Listener) releaseLocked(c *conn) {
	if c.closed {
		return
	}
	c.closed = true
	if c.wait != nil {
		l.waiting.Remove(c.wait)
		c.wait = nil
	}
	l.open--
	if l.perAddr[c.addr]--; l.perAddr[c.addr] <= 0 {
		delete(l.perAddr, c.addr)
	}
}

// Stats are a Listener's counts.
type Stats struct {
	Open    int   // connections open now
	Waiting int   // of those, the ones waiting for a request
	Refused int64 // connections closed at once, over a cap
	Evicted int64 // waiting connections closed to make room for a new one
}

// Stats returns the counts so far.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	open, waiting := l.open, l.waiting.Len()
	l.mu.Unlock()
	return Stats{Open: open, Waiting: waiting, Refused: l.refused.Load(), Evicted: l.evicted.Load()}
}

// peer is c's remote address without its port; IPv4 in IPv6 is unmapped,
// so that one client is one address whichever way it came.
func peer(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Addr{} // not TCP: every such peer is one address
	}
	return ap.Addr().Unmap()
}
