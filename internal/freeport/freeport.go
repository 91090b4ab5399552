// Package freeport finds loopback TCP ports for servers started in other
// processes (redis-server, etcd members, nginx, a MariaDB of a test's own),
// which are told a port number rather than handed a listener.
//
// A port is free only when probed: between the probe and the server's bind
// another process may take it. Asking the kernel for port 0 makes that
// likely under load, because the kernel hands out the same ephemeral range
// (32768–60999 on Linux) to every outgoing connection, and a test package
// running beside this one opens thousands. The ports here are drawn at random
// from below that range, where only another listener choosing the same
// number in the same moment can collide.
package freeport

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// handed are the ports this process was given: a port is probed and
// released before its server binds it, so two draws close together (an
// etcd cluster's six ports) could give one twice.
var handed struct {
	sync.Mutex
	ports map[int]bool
}

// take reports whether p is free and not handed out before, and if so
// hands it out.
func take(ports ...int) bool {
	handed.Lock()
	defer handed.Unlock()
	for _, p := range ports {
		if handed.ports[p] || !Free(p) {
			return false
		}
	}
	if handed.ports == nil {
		handed.ports = make(map[int]bool)
	}
	for _, p := range ports {
		handed.ports[p] = true
	}
	return true
}

// Port returns a loopback TCP port in 10000–19999 that was free a moment
// ago, and that this process was not given before.
func Port() (int, error) {
	for range 100 {
		if p := 10000 + rand.IntN(10000); take(p) {
			return p, nil
		}
	}
	return 0, errors.New("no free loopback port found in 10000–19999")
}

// Addr is Port as a host:port on 127.0.0.1.
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// ClusterPort returns a port p with p and p+10000 both free, for a Redis
// Cluster node, whose bus listens on p+10000: p in 20000–22767, so that
// both stay below the ephemeral range.
func ClusterPort() (int, error) {
	for range 100 {
		if p := 20000 + rand.IntN(2768); take(p, p+10000) {
			return p, nil
		}
	}
	return 0, errors.New("no free pair of loopback ports (p, p+10000) found in 20000–32767")
}

// Free reports whether port can be listened on at 127.0.0.1 now.
func Free(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
