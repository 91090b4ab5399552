package freeport

import (
	"net"
	"strconv"
	"testing"
)

// A process is never given one port twice, even when it releases it.
func TestPortsAreNotHandedTwice(t *testing.T) {
	seen := make(map[int]bool)
	for range 500 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed twice", p)
		}
		seen[p] = true
	}
}

// The ports come from below the kernel's ephemeral range, are free when
// returned, and a port something listens on is not free.
func TestPortsAreFreeAndBelowTheEphemeralRange(t *testing.T) {
	for range 50 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if p < 10000 || p > 19999 {
			t.Fatalf("Port() = %d, want 10000–19999", p)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("Port() = %d, which cannot be listened on: %v", p, err)
		}
		if Free(p) {
			t.Fatalf("Free(%d) while listening on it", p)
		}
		l.Close()
		c, err := ClusterPort()
		if err != nil {
			t.Fatal(err)
		}
		if c < 20000 || c+10000 > 32767 {
			t.Fatalf("ClusterPort() = %d, want 20000–22767", c)
		}
	}
}
