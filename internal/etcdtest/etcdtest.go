// Package etcdtest gives tests an etcd: the cluster ETCD_ENDPOINTS names,
// else an embedded one-member etcd of the test's own (see etcdembed), so
// that the etcd lock's tests run on a machine with only Go installed.
package etcdtest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"seckill/internal/etcdembed"
)

// Endpoints returns ETCD_ENDPOINTS's cluster, or starts an embedded etcd
// that lives until the test ends.
func Endpoints(tb testing.TB) []string {
	tb.Helper()
	eps, stop, err := Start()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return eps
}

// Start returns ETCD_ENDPOINTS's cluster, or starts an embedded etcd that
// stop ends.
func Start() (endpoints []string, stop func(), err error) {
	if env := os.Getenv("ETCD_ENDPOINTS"); env != "" {
		return strings.Split(env, ","), func() {}, nil
	}
	s, err := etcdembed.StartSingle()
	if err != nil {
		return nil, nil, err
	}
	return []string{s.Endpoint()}, func() { s.Close() }, nil
}

// Real reports whether the tests run on the etcd ETCD_ENDPOINTS names.
func Real() bool { return os.Getenv("ETCD_ENDPOINTS") != "" }

// Client returns a client of Endpoints(tb), closed when the test ends.
func Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	return NewClient(tb, Endpoints(tb))
}

// NewClient returns a client of endpoints, closed when the test ends.
func NewClient(tb testing.TB, endpoints []string) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: etcdembed.NopLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// Connect adapts cli to the lock package's EtcdConnect.
func Connect(cli *clientv3.Client) func(context.Context) (*clientv3.Client, error) {
	return func(context.Context) (*clientv3.Client, error) { return cli, nil }
}
