package child_test

import (
	"bufio"
	"net"
	"testing"

	"seckill/internal/testkit/child"
)

// echo serves lines back on a free port until the test ends.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader) (string, error) {
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

// Through the proxy a connection reaches the target; cut, the open one
// ends and a new one gets no answer; restored, a new one reaches it again.
func TestCutAndRestore(t *testing.T) {
	p, err := child.StartProxy(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r); err != nil || got != "ping\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.Cut()
	if got, err := roundTrip(c, r); err == nil {
		t.Errorf("an open connection after the cut answered %q", got)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		if got, err := roundTrip(c2, bufio.NewReader(c2)); err == nil {
			t.Errorf("a new connection during the cut answered %q", got)
		}
		c2.Close()
	}
	p.Restore()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, bufio.NewReader(c3)); err != nil || got != "ping\n" {
		t.Errorf("after the restore: %q, %v", got, err)
	}
}
