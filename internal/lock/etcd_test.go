package lock

import (
	"errors"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"seckill/internal/embedded"
	"seckill/internal/testkit"
)

// Each grant of a key carries a token above every earlier one, also when it
// waited for the previous holder: the fence relies on it.
func TestEtcdTokensGrow(t *testing.T) {
	l := NewEtcd(testkit.ConnectEtcd(testkit.EtcdClient(t)))
	key := "tokens-" + t.Name() + time.Now().Format(time.RFC3339Nano)
	a := acquire(t, l, key, Options{TTL: longTTL})
	type result struct {
		l   Lease
		err error
	}
	got := make(chan result, 1)
	go func() { // waits for A
		l, err := l.Acquire(t.Context(), key, Options{TTL: longTTL, Wait: patience})
		got <- result{l, err}
	}()
	if err := a.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("B, waiting for A: %v", r.err)
	}
	b := r.l
	c := func() Lease {
		if err := b.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		return acquire(t, l, key, Options{TTL: longTTL})
	}()
	defer c.Release(t.Context())
	if !(a.Token() > 0 && a.Token() < b.Token() && b.Token() < c.Token()) {
		t.Errorf("tokens %d, %d, %d; want growing from above 0", a.Token(), b.Token(), c.Token())
	}
	// Fail-fast on a held lock: refused, and the attempt leaves no key.
	refused(t, l, key, 0)
	if err := c.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(t.Context()); !errors.Is(err, ErrNotHeld) {
		t.Errorf("a second release = %v, want ErrNotHeld", err)
	}
}

// An etcd that does not answer makes an acquisition fail within EtcdStep or
// so, saying so, not hang until the request's own deadline.
func TestEtcdUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addr}, DialTimeout: time.Second, Logger: embedded.NopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	l := NewEtcd(testkit.ConnectEtcd(cli))
	start := time.Now()
	_, err = l.Acquire(t.Context(), "unavailable", Options{Wait: time.Minute})
	took := time.Since(start)
	if !errors.Is(err, ErrEtcdUnavailable) || took > 2*EtcdStep {
		t.Errorf("Acquire on a dead etcd = %v after %s; want ErrEtcdUnavailable within %s", err, took, 2*EtcdStep)
	}
}
