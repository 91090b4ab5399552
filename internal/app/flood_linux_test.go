package app_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"seckill/internal/app"
	"seckill/internal/testkit"
	"seckill/internal/testkit/child"
)

// TestMain lets this test binary be the service instance it starts.
func TestMain(m *testing.M) { child.Main(testkit.Summarize(m.Run), app.StartChild) }

// Idle keep-alive connections that would use up the service's file
// descriptors several times over leave honest buyers from another address
// served (issue 36, finding 4). The service runs as a child whose
// descriptor limit the test lowers to fd, so that this process can hold the
// flood's client ends: the numbers are the limit's, scaled down from the
// 20,000 connections of the finding. The total cap is the default's rule,
// three quarters of the limit; the per-address cap is the default.
func TestIdleFloodLeavesHonestBuyersServed(t *testing.T) {
	const fd = 2048
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := child.StartInstance(t.Context(), exe, []string{"-addr", "127.0.0.1:0", "-demo-stock", "0", "-log-level", "error",
		"-max-conns", fmt.Sprint(fd / 2)}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Kill)
	lim := unix.Rlimit{Cur: fd, Max: fd}
	if err := unix.Prlimit(in.Pid(), unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		t.Fatalf("lowering the service's descriptor limit: %v", err)
	}
	addr := in.URL[len("http://"):]

	// One address floods past its cap; four more stay under theirs and
	// together pass the total: three and a half times the descriptors.
	flood := map[string]int{"127.0.0.2": 3 * fd / 2, "127.0.0.3": fd / 2, "127.0.0.4": fd / 2, "127.0.0.5": fd / 2, "127.0.0.6": fd / 2}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for from, n := range flood {
		for range 4 {
			wg.Go(func() {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: time.Second}
				for range n / 4 {
					c, err := d.Dial("tcp", addr)
					if err != nil {
						continue // a refused connection is the flood's loss
					}
					mu.Lock()
					conns = append(conns, c)
					mu.Unlock()
					idle(c)
				}
			})
		}
	}
	wg.Wait()

	honest := &http.Client{
		Timeout:   30 * time.Second, // without the caps, none is answered before the idle timeout
		Transport: &http.Transport{DisableKeepAlives: true, DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}).DialContext},
	}
	for i := range 20 {
		resp, err := honest.Get(in.URL + "/healthz")
		if err != nil {
			t.Fatalf("honest request %d under %d idle connections: %v", i, len(conns), err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("honest request %d: %d", i, resp.StatusCode)
		}
	}
}

// idle sends one request on c and reads nothing: its answer waits in the
// socket's buffer while the service holds the connection idle, as a
// keep-alive client's between requests. The request is a miss, which
// touches no backend: the flood's cost is its descriptors, not its work.
func idle(c net.Conn) {
	_, _ = io.WriteString(c, "GET /api/nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
}
