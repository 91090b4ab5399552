package main

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Link is the replication link between a replica and its master, through a
// forwarder of the drill's own: the replica replicates from Link's address.
// Cut stops the master's stream from reaching the replica, as a network
// partition of that one link would; unlike pausing the replica's process,
// which leaves the stream in the replica's socket buffer to be applied when
// it wakes, what the master sends after Cut never arrives.
type Link struct {
	l      net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

// NewLink forwards a loopback port to target (the master's host:port).
func NewLink(target string) (*Link, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the replication link: %w", err)
	}
	k := &Link{l: l, target: target}
	k.wg.Go(k.serve)
	return k, nil
}

// Addr is where the replica is to replicate from.
func (k *Link) Addr() string { return k.l.Addr().String() }

// Cut drops from now on whatever the master sends down the link.
func (k *Link) Cut() error { k.cut.Store(true); return nil }

func (k *Link) serve() {
	for {
		in, err := k.l.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", k.target)
		if err != nil {
			in.Close()
			continue
		}
		k.mu.Lock()
		k.conns = append(k.conns, in, out)
		k.mu.Unlock()
		k.wg.Go(func() { io.Copy(out, in); out.Close() }) // the replica's commands and acks
		k.wg.Go(func() {                                  // the master's stream, until cut
			buf := make([]byte, 32<<10)
			for {
				n, err := out.Read(buf)
				if n > 0 && !k.cut.Load() {
					if _, werr := in.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			in.Close()
		})
	}
}

// Close closes the link and waits for its forwarders.
func (k *Link) Close() error {
	err := k.l.Close()
	k.mu.Lock()
	for _, c := range k.conns {
		c.Close()
	}
	k.mu.Unlock()
	k.wg.Wait()
	return err
}
