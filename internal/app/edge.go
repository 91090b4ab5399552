package app

import (
	"seckill/internal/admission"
	"seckill/internal/catalogue"
	"seckill/internal/order"
	"seckill/internal/reconcile"
	"seckill/internal/server"
)

// The parts of the service that New hands to the server, each as the
// interface the server declares for what it does with it.
var (
	_ server.Buyer        = (*order.Service)(nil)
	_ server.Reader       = (*order.Reads)(nil)
	_ server.Payer        = (*order.Lifecycle)(nil)
	_ server.Catalogue    = (*catalogue.Catalogue)(nil)
	_ server.Door         = (*order.Door)(nil)
	_ server.Queue        = (*order.Queue)(nil)
	_ server.Auditor      = (*reconcile.Reconciler)(nil)
	_ server.Captchas     = (*admission.Captchas)(nil)
	_ server.AddressLimit = (*admission.PerAddress)(nil)
)
