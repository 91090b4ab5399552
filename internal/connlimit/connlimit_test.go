package connlimit_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"seckill/internal/connlimit"
)

// serve serves h on a capped loopback listener and returns its address.
func serve(t *testing.T, o connlimit.Options, h http.Handler) (string, *connlimit.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	capped := connlimit.NewListener(ln, o)
	srv := &http.Server{Handler: h, ConnState: capped.ConnState, ReadHeaderTimeout: time.Minute}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(capped) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String(), capped
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

// dial connects from the loopback address from (127.0.0.0/8 is all the
// machine's own on Linux).
func dial(t *testing.T, from, to string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", to)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends one keep-alive GET on c and reports whether it was answered.
func get(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// closedByServer waits for c's server to close it.
func closedByServer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// waitIdle polls until the listener counts n connections waiting.
func waitIdle(t *testing.T, l *connlimit.Listener, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.Stats().Waiting != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections waiting, want %d", l.Stats().Waiting, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// One address holds at most PerAddress connections; the next is closed at
// once, and another address is served.
func TestPerAddressCap(t *testing.T) {
	addr, l := serve(t, connlimit.Options{PerAddress: 3}, ok)
	for range 3 {
		if err := get(dial(t, "127.0.0.2", addr)); err != nil {
			t.Fatalf("a connection within the cap: %v", err)
		}
	}
	if c := dial(t, "127.0.0.2", addr); !closedByServer(c) {
		t.Error("a fourth connection from one address was kept open")
	}
	if err := get(dial(t, "127.0.0.3", addr)); err != nil {
		t.Errorf("another address: %v", err)
	}
	if s := l.Stats(); s.Refused != 1 || s.Open != 4 {
		t.Errorf("stats %+v, want 1 refused and 4 open", s)
	}
}

// An exempt address (a trusted proxy) is not capped per address.
func TestExemptAddress(t *testing.T) {
	proxy := netip.MustParseAddr("127.0.0.4")
	addr, _ := serve(t, connlimit.Options{PerAddress: 1, Exempt: func(a netip.Addr) bool { return a == proxy }}, ok)
	for range 3 {
		if err := get(dial(t, "127.0.0.4", addr)); err != nil {
			t.Fatalf("the proxy's connection: %v", err)
		}
	}
}

// Over Total, the connection that has waited longest for a request is
// closed to make room, and the new one is served.
func TestTotalEvictsTheLongestWaiting(t *testing.T) {
	addr, l := serve(t, connlimit.Options{Total: 3}, ok)
	var conns []net.Conn
	for _, from := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		c := dial(t, from, addr)
		if err := get(c); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		waitIdle(t, l, len(conns))
	}
	// Used again, the first waits least: the second has waited longest.
	if err := get(conns[0]); err != nil {
		t.Fatal(err)
	}
	fresh := dial(t, "127.0.0.5", addr)
	if err := get(fresh); err != nil {
		t.Fatalf("the new connection: %v", err)
	}
	if !closedByServer(conns[1]) {
		t.Error("the connection idle longest was kept")
	}
	for _, c := range []net.Conn{conns[0], conns[2]} {
		if err := get(c); err != nil {
			t.Errorf("a connection idle for less time was closed: %v", err)
		}
	}
	if s := l.Stats(); s.Evicted != 1 || s.Open != 3 {
		t.Errorf("stats %+v, want 1 evicted and 3 open", s)
	}
}

// When every connection serves a request, one more is refused: a request
// in flight is never cut.
func TestTotalKeepsRequestsInFlight(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	addr, l := serve(t, connlimit.Options{Total: 2}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		io.WriteString(w, "ok")
	}))
	answered := make(chan error, 2)
	for _, from := range []string{"127.0.0.2", "127.0.0.3"} {
		c := dial(t, from, addr)
		go func() { answered <- get(c) }()
	}
	<-entered
	<-entered
	if c := dial(t, "127.0.0.4", addr); !closedByServer(c) {
		t.Error("a connection over the cap was kept while every other served a request")
	}
	close(release)
	for range 2 {
		if err := <-answered; err != nil {
			t.Errorf("a request in flight: %v", err)
		}
	}
	if s := l.Stats(); s.Refused != 1 || s.Evicted != 0 {
		t.Errorf("stats %+v, want 1 refused, none evicted", s)
	}
}
