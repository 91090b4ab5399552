// Package gateconf holds the sold-out gate's nginx files, embedded so that
// the test and the load harness (internal/gate.StartNginx) run exactly the
// files the compose lab mounts. nginx.conf beside them is the compose lab's
// main config; StartNginx writes one of its own.
package gateconf

import "embed"

// Files are seckill_gate.lua, locations.conf and control.conf.
//
//go:embed seckill_gate.lua locations.conf control.conf
var Files embed.FS
