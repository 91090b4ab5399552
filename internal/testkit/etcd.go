// This file gives tests an etcd: the cluster ETCD_ENDPOINTS names,
// else an embedded one-member etcd of the test's own (see internal/embedded), so
// that the etcd lock's tests run on a machine with only Go installed.

package testkit

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"seckill/internal/embedded"
	"seckill/internal/testkit/child"
)

// EtcdEndpoints returns ETCD_ENDPOINTS's cluster, or starts an embedded etcd
// that lives until the test ends.
func EtcdEndpoints(tb testing.TB) []string {
	tb.Helper()
	eps, stop, err := child.StartEtcd()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return eps
}

// RealEtcd reports whether the tests run on the etcd ETCD_ENDPOINTS names.
func RealEtcd() bool { return os.Getenv("ETCD_ENDPOINTS") != "" }

// EtcdClient returns a client of EtcdEndpoints(tb), closed when the test ends.
func EtcdClient(tb testing.TB) *clientv3.Client {
	tb.Helper()
	return NewEtcdClient(tb, EtcdEndpoints(tb))
}

// NewEtcdClient returns a client of endpoints, closed when the test ends.
func NewEtcdClient(tb testing.TB, endpoints []string) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: embedded.NopLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// ConnectEtcd adapts cli to the lock package's EtcdConnect.
func ConnectEtcd(cli *clientv3.Client) func(context.Context) (*clientv3.Client, error) {
	return func(context.Context) (*clientv3.Client, error) { return cli, nil }
}

// EtcdServer returns an etcd for measurements: ETCD_ENDPOINTS's, else the etcd
// binary in a process of its own when it is on PATH (as the Redis numbers
// come from redis-server processes), else an embedded one in this process.
// kind names which.
func EtcdServer(tb testing.TB) (endpoints []string, kind string) {
	tb.Helper()
	if RealEtcd() {
		return EtcdEndpoints(tb), "ETCD_ENDPOINTS"
	}
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return EtcdEndpoints(tb), "embedded"
	}
	ms, err := embedded.Layout(tb.TempDir(), 1)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, embedded.Args(ms[0], embedded.InitialCluster(ms), embedded.Timing{})...)
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	cli := NewEtcdClient(tb, []string{ms[0].ClientURL})
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, ms[0].ClientURL)
		cancel()
		if err == nil && st.Leader != 0 {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("etcd on %s did not elect itself within 30s: %v", ms[0].ClientURL, err)
		}
		time.Sleep(20 * time.Millisecond) // polling its status, with a deadline
	}
	return []string{ms[0].ClientURL}, "etcd " + bin
}
