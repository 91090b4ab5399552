package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"seckill/internal/embedded"
)

// etcdConn is the etcd lock's connection, made on the strategy's first use
// so that a service that never locks with etcd pays nothing for it: to the
// cluster ETCD_ENDPOINTS names, or to an etcd embedded in this process,
// started then, in a temporary directory. The client dials without blocking,
// so endpoints that do not answer cost the service nothing at start and a
// purchase under etcd a bounded wait (lock.EtcdStep) at most.
type etcdConn struct {
	endpoints []string

	mu       sync.Mutex
	starting chan struct{} // closed when the attempt under way ends; nil when none is
	cli      *clientv3.Client
	srv      *embedded.Server
	err      error // the last attempt's
	closed   bool
}

// connect returns the client, making it (and the embedded etcd) if need be.
// A caller whose ctx ends first gives up waiting; the start goes on for the
// next one. A failed start is tried again by the next caller.
func (c *etcdConn) connect(ctx context.Context) (*clientv3.Client, error) {
	c.mu.Lock()
	if c.cli != nil {
		defer c.mu.Unlock()
		return c.cli, nil
	}
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("etcd: the service is closing")
	}
	if c.starting == nil {
		c.starting = make(chan struct{})
		go c.start(c.starting)
	}
	starting := c.starting
	c.mu.Unlock()
	select {
	case <-starting:
	case <-ctx.Done():
		return nil, fmt.Errorf("etcd is still starting: %w", context.Cause(ctx))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cli != nil {
		return c.cli, nil
	}
	return nil, c.err
}

func (c *etcdConn) start(done chan struct{}) {
	var (
		srv *embedded.Server
		err error
	)
	eps := c.endpoints
	if len(eps) == 0 {
		if srv, err = embedded.StartSingle(); err == nil {
			eps = []string{srv.Endpoint()}
		}
	}
	var cli *clientv3.Client
	if err == nil {
		cli, err = clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: embedded.NopLogger()})
		if err != nil {
			err = fmt.Errorf("etcd client for %v: %w", eps, err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(done)
	c.starting = nil
	if err == nil && c.closed { // Close came first: nobody will close these
		err = fmt.Errorf("etcd: the service is closing")
	}
	if err != nil {
		if cli != nil {
			cli.Close()
		}
		if srv != nil {
			srv.Close()
		}
		c.err = err
		return
	}
	c.cli, c.srv = cli, srv
}

// Close closes the client and stops the embedded etcd, if they were made.
func (c *etcdConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var err error
	if c.cli != nil {
		err = c.cli.Close()
	}
	if c.srv != nil {
		if cerr := c.srv.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
