// Proxy is a TCP proxy that a test or the load harness can cut:
// the server behind it becomes unreachable for the proxy's clients (their
// connections reset, new ones closed at once) while it keeps running for
// everyone else. It is how a database shared with other users is made to
// vanish for one service only.

package child

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections from its loopback address to a target.
type Proxy struct {
	target string
	ln     net.Listener

	held atomic.Bool // the target's replies wait (Hold)

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// StartProxy listens on a free loopback port and forwards every connection to
// target (host:port).
func StartProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the proxy to %s: %w", target, err)
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's address, to give the clients instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut makes the target unreachable: open connections are closed, and new
// ones are closed as soon as they are accepted, until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore forwards new connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// Hold keeps back what the target sends, while what the clients send
// still reaches it: requests run and their answers are lost to the
// clients for as long as it lasts (until Release), on every connection.
func (p *Proxy) Hold() { p.held.Store(true) }

// Release sends the held replies on, and the later ones.
func (p *Proxy) Release() { p.held.Store(false) }

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

// track records c unless the proxy is cut.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

// forward copies both ways between c and a new connection to the target;
// either side's end, or a cut, ends both.
func (p *Proxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(up) {
		if up != nil {
			up.Close()
		}
		p.untrack(c)
		return
	}
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // ends with either side, or with a cut
		dst.Close()
		src.Close()
	}
	wg.Go(func() { pipe(up, c) })
	wg.Go(func() {
		_, _ = io.Copy(c, heldReader{up, &p.held})
		c.Close()
		up.Close()
	})
	wg.Wait()
	p.untrack(c, up)
}

// heldReader reads from r, and waits while held is set before handing on
// what it read.
type heldReader struct {
	r    io.Reader
	held *atomic.Bool
}

func (h heldReader) Read(b []byte) (int, error) {
	n, err := h.r.Read(b)
	for n > 0 && h.held.Load() {
		time.Sleep(5 * time.Millisecond) // the poll interval
	}
	return n, err
}
